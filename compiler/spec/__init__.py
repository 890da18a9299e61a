"""Step 2: the StandbySpec model (pydantic v2, unknown fields refused), and the names its
callers import: ``sections`` (the spec, section by section), ``weight_sync`` and ``alerts``
(two sections of their own), ``types`` (the scalar types: unit-carrying fields are parsed by
``compiler.units`` and stored as integers: bit/s, bytes, milliseconds) and ``cron``."""

from compiler.spec.alerts import (
    Alerts,
    DurationAlert,
    RateAlert,
    TierRateAlert,
    duration_alert,
    rate_alert,
    settings,
    tier_rate_alert,
    with_settings,
)
from compiler.spec.cron import cron_longest_gap
from compiler.spec.sections import (
    DEFAULT_PRIORITY,
    ConnectionPool,
    DashboardSettings,
    EnginePorts,
    StandbySpec,
    json_schema,
    with_alerts,
)
from compiler.spec.types import TIER_NAMES, BitsPerSecond, Millis, Model
from compiler.spec.weight_sync import (
    SYNC_IMAGE,
    ArgoHookTrigger,
    CertificateVerify,
    IrsaCredentials,
    KeyVerify,
    ProfileCredentials,
    Resources,
    ScheduleTrigger,
    SecretCredentials,
    StoreCredentials,
    TrustFile,
    Verify,
)

__all__ = [
    "DEFAULT_PRIORITY",
    "SYNC_IMAGE",
    "TIER_NAMES",
    "Alerts",
    "ArgoHookTrigger",
    "BitsPerSecond",
    "CertificateVerify",
    "ConnectionPool",
    "DashboardSettings",
    "DurationAlert",
    "EnginePorts",
    "IrsaCredentials",
    "KeyVerify",
    "Millis",
    "Model",
    "ProfileCredentials",
    "RateAlert",
    "Resources",
    "ScheduleTrigger",
    "SecretCredentials",
    "StandbySpec",
    "StoreCredentials",
    "TierRateAlert",
    "TrustFile",
    "Verify",
    "cron_longest_gap",
    "duration_alert",
    "json_schema",
    "rate_alert",
    "settings",
    "tier_rate_alert",
    "with_alerts",
    "with_settings",
]
