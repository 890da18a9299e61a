"""Step 3: derive every number the renderers need, once, with units spelled out."""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from compiler import names, units
from compiler.spec import DEFAULT_PRIORITY, StandbySpec


@dataclass(frozen=True)
class TierPlan:
    name: str
    replicas: int
    egress_bps: int
    egress_quantity: str  # what Cilium reads: a quantity in bit/s, e.g. "25G"
    priority: str  # Cilium Network QoS class, or an integer as a string
    selector: dict[str, str]  # engine selector plus the tier label
    sync_rate_bps: int  # weight-sync rate limit per index
    sync_seconds_full: float  # one full copy at the sync rate, for one wave of indexes
    sync_seconds_delta: float


@dataclass(frozen=True)
class Plan:
    spec: StandbySpec
    source: str  # spec file as shown to the user
    tiers: tuple[TierPlan, ...]  # tiers with at least one replica, hot first
    sync_tiers: tuple[TierPlan, ...]
    standby_replicas: int  # replicas that weight sync feeds
    full_copy_bytes: int
    full_copy_seconds: float  # all standbys, at link rate, before protocol overhead
    delta_bytes: int
    delta_seconds: float
    health_probes_per_second: Fraction
    health_bytes_per_second: Fraction
    migration_seconds: float  # serial connection migration estimate
    source_url: str
    source_selector: dict[str, str]
    claim: str

    @property
    def name(self) -> str:
        return self.spec.metadata.name

    @property
    def namespace(self) -> str:
        return self.spec.metadata.namespace

    def summary(self) -> dict[str, Any]:
        """Derived numbers with their formulas, for the compile summary."""
        s = self.spec.spec
        size = s.model.size
        hc = s.health_checks
        targets = sum(t.replicas for t in self.tiers)
        return {
            "fullCopy": {
                "formula": f"{units.human_bytes(size)} x {self.standby_replicas} standbys / "
                f"{units.human_bits(s.network.link)}",
                "bytes": self.full_copy_bytes,
                "gigabits": round(self.full_copy_bytes * 8 / 1e9, 2),
                "seconds": round(self.full_copy_seconds, 3),
            },
            "delta": {
                "formula": f"full copy x expected delta {float(s.weight_sync.expected_delta):.1%}",
                "bytes": self.delta_bytes,
                "seconds": round(self.delta_seconds, 3),
            },
            "healthChecks": {
                "formula": f"{_plural(hc.probers, 'prober')} x {_plural(targets, 'target')} / "
                f"{units.prom_duration(hc.interval)}",
                "probesPerSecond": float(self.health_probes_per_second),
                "bytesPerSecond": float(self.health_bytes_per_second),
            },
            "connectionMigration": {
                "formula": f"{s.connections.expected} connections x "
                f"{units.prom_duration(s.connections.migration_time)} (serial)",
                "seconds": round(self.migration_seconds, 3),
            },
            "tiers": {
                t.name: {
                    "replicas": t.replicas,
                    "egress": t.egress_quantity,
                    "priority": t.priority,
                    "syncRateBitsPerSecond": t.sync_rate_bps,
                }
                for t in self.tiers
            },
        }


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _tier_plan(spec: StandbySpec, name: str) -> TierPlan:
    s = spec.spec
    tier = getattr(s.tiers, name)
    ws = s.weight_sync
    rate = int(tier.egress * ws.bandwidth_share)
    waves = math.ceil(tier.replicas / ws.parallelism) if tier.replicas else 0
    full = s.model.size * 8 / rate * waves
    priority = tier.priority if tier.priority is not None else DEFAULT_PRIORITY[name]
    return TierPlan(
        name=name,
        replicas=tier.replicas,
        egress_bps=tier.egress,
        egress_quantity=units.k8s_quantity(tier.egress),
        priority=str(priority),
        selector={**s.engine.selector, s.engine.tier_label: name},
        sync_rate_bps=rate,
        sync_seconds_full=full,
        sync_seconds_delta=full * float(ws.expected_delta),
    )


def build(spec: StandbySpec, source: str) -> Plan:
    s = spec.spec
    all_tiers = tuple(_tier_plan(spec, n) for n, t in s.tiers.items() if t.replicas)
    sync_tiers = tuple(t for t in all_tiers if t.name in s.weight_sync.tiers)
    standbys = sum(t.replicas for t in sync_tiers)
    full_bytes = s.model.size * standbys
    full_seconds = full_bytes * 8 / s.network.link
    delta_bytes = int(full_bytes * s.weight_sync.expected_delta)
    targets = sum(t.replicas for t in all_tiers)
    probes = Fraction(s.health_checks.probers * targets * 1000, s.health_checks.interval)
    ports = s.engine.ports
    return Plan(
        spec=spec,
        source=source,
        tiers=all_tiers,
        sync_tiers=sync_tiers,
        standby_replicas=standbys,
        full_copy_bytes=full_bytes,
        full_copy_seconds=full_seconds,
        delta_bytes=delta_bytes,
        delta_seconds=delta_bytes * 8 / s.network.link,
        health_probes_per_second=probes,
        health_bytes_per_second=probes * s.health_checks.payload,
        migration_seconds=s.connections.expected * s.connections.migration_time / 1000,
        source_url=s.weight_sync.source.url
        or f"http://{spec.metadata.name}-weights.{spec.metadata.namespace}.svc:{ports.weights}",
        source_selector=s.weight_sync.source.selector or {**s.engine.selector, "role": "primary"},
        claim=names.weights_claim(spec),
    )
