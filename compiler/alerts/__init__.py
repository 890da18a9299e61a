"""The alerts: one module each (its spec key, its settings, its rule and its promtool
cases), and the one registry that the spec model, rendering and the spec checks all
iterate, so an alert cannot be configured without being rendered, or rendered without its
timing being checked.

Adding an alert (docs/alerts.md): a module here with ``KEY``, ``SETTINGS`` (its defaults,
from ``spec.duration_alert`` or ``spec.rate_alert``) and ``build(ctx)`` (its cases for a data
source down from ``outages``), and its line in ``ALERTS``. ``STANDBY_SPEC`` is the spec
model with a field for each: ``alerts.<KEY>``.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from compiler import units
from compiler.alerts import (
    bandwidth_high,
    failover_spike,
    hot_replicas_low,
    tier_labels_missing,
    weight_sync_failed,
    weights_behind,
    weights_not_served,
    weights_refused,
    weights_unreported,
)
from compiler.alerts.base import Alert, Context
from compiler.load import Problem
from compiler.plan import Plan
from compiler.spec import DurationAlert, RateAlert, with_alerts, with_settings

ALERTS: tuple[ModuleType, ...] = (
    bandwidth_high,
    failover_spike,
    hot_replicas_low,
    tier_labels_missing,
    weight_sync_failed,
    weights_behind,
    weights_unreported,
    weights_not_served,
    weights_refused,
)
# A rate window must hold this many scrapes to survive one missed scrape (Prometheus'
# guidance: four); with two, one missed scrape empties the window and resolves the alert.
MIN_SCRAPES = 4
# The generated promtool cases hold series of (window + for + keepFiringFor) / scrape
# samples; building them takes about a millisecond per sample and alert. Beyond this, one
# spec would compile for minutes (a for of 1000h: 120,000 samples).
MAX_SAMPLES = 3000


def field(module: ModuleType) -> str:
    """The module's settings attribute on the spec's alerts (its module name; the spec
    writes it camelCased, its ``KEY``)."""
    return module.__name__.rsplit(".", 1)[1]


def is_rate(module: ModuleType) -> bool:
    """A threshold over a rate window (its settings have a ``window``), or a ``for`` alone."""
    return issubclass(module.SETTINGS, RateAlert)


def _settings(module: ModuleType) -> type[DurationAlert | RateAlert]:
    """The module's settings class, which it holds as SETTINGS, and now also as
    ``<module>.<the class's name>``: the name pickle finds a class by, and the compile's worker
    processes hand back plans that hold the settings, pickled."""
    cls: type[DurationAlert | RateAlert] = module.SETTINGS
    cls.__module__ = module.__name__
    setattr(module, cls.__name__, cls)
    return cls


# The spec as it is admitted: every alert's settings in its alerts section. These classes
# are made here at import, and held here by their names (for pickle, as above).
Alerts = with_settings({field(module): _settings(module) for module in ALERTS}, __name__)
Spec, StandbySpec = with_alerts(Alerts, __name__)
STANDBY_SPEC = StandbySpec


def build_all(plan: Plan) -> list[Alert]:
    ctx = Context(plan)
    built = (module.build(ctx) for module in ALERTS)
    return [a for a in built if a is not None]


def timing_problems(alerts: Any) -> list[Problem]:
    """Every alert's ``for`` against the evaluation interval, and every rate window against
    the scrape interval."""
    out: list[Problem] = []
    for module in ALERTS:
        cfg = getattr(alerts, field(module))
        if cfg.for_ < alerts.evaluation_interval:
            out.append(
                (
                    ("spec", "alerts", module.KEY, "for"),
                    f"for {units.prom_duration(cfg.for_)} is shorter than the rule evaluation "
                    f"interval {units.prom_duration(alerts.evaluation_interval)}",
                )
            )
    for module in ALERTS:
        cfg = getattr(alerts, field(module))
        if is_rate(module) and cfg.window < MIN_SCRAPES * alerts.scrape_interval:
            out.append(
                (
                    ("spec", "alerts", module.KEY, "window"),
                    f"rate window {units.prom_duration(cfg.window)} holds fewer than "
                    f"{MIN_SCRAPES} scrapes at scrapeInterval "
                    f"{units.prom_duration(alerts.scrape_interval)}; with fewer, one missed "
                    "scrape resolves the alert",
                )
            )
    for module in ALERTS:
        cfg = getattr(alerts, field(module))
        span = cfg.for_ + (cfg.window if is_rate(module) else 0)
        span += getattr(cfg, "keep_firing_for", None) or 0
        samples = span // alerts.scrape_interval
        if samples > MAX_SAMPLES:
            most = units.prom_duration(MAX_SAMPLES * alerts.scrape_interval)
            what = "for + window + keepFiringFor" if is_rate(module) else "for"
            out.append(
                (
                    ("spec", "alerts", module.KEY, "for"),
                    f"{what} of {units.prom_duration(span)} at scrapeInterval "
                    f"{units.prom_duration(alerts.scrape_interval)} makes generated test series "
                    f"of {samples} samples; at most {MAX_SAMPLES} (keep {what} within {most})",
                )
            )
    return out
