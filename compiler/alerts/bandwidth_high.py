"""InferenceBandwidthHigh: a standby pod sends more than its tier's threshold.

Each tier has its own threshold (``TierRateAlert``): by default 85 % of what one of its
pods may send (its QoS cap, or the link where lower), so a normal takeover at the cap does
not page and a pod over it does; a tier the spec gives no egress (a pod relabelled into
it is not capped) is measured against the link."""

from __future__ import annotations

from typing import Any, get_args

from compiler import units
from compiler.alerts import rate
from compiler.alerts.base import Alert, Context
from compiler.load import Problem
from compiler.plan import Plan
from compiler.spec import TierRateAlert, settings, tier_rate_alert
from compiler.spec.types import TierName

KEY = "bandwidthHigh"  # its settings in the spec: alerts.bandwidthHigh
SETTINGS = tier_rate_alert(KEY, window=5 * 60_000, for_=5 * 60_000, severity="warning")


def thresholds(plan: Plan, cfg: TierRateAlert | None = None) -> dict[str, int]:
    """Each standby tier's threshold in bit/s, also of the tiers the spec gives no replicas
    (a pod promoted into one stays watched)."""
    cfg = cfg or settings(plan.alerts, SETTINGS)
    caps = {t.name: t.egress_bps for t in plan.tiers}
    return {t: cfg.for_tier(t, caps.get(t), plan.link_bps) for t in get_args(TierName)}


def build(ctx: Context) -> Alert | None:
    cfg = ctx.settings(SETTINGS)
    each = thresholds(ctx.plan, cfg)
    said = ", ".join(f"{t} {units.human_bits(each[t])}" for t in ctx.tiers)
    alert = Alert(
        name="InferenceBandwidthHigh",
        expr=rate.per_tier_expression(ctx, cfg, KEY, each),
        for_ms=cfg.for_,
        keep_firing_ms=rate.keep_firing(ctx, cfg),
        labels={**ctx.base_labels, "severity": cfg.severity},
        actions=(
            f"{ctx.look('egress panel of its tier')}: one pod above its threshold "
            "while the others are not is that pod's own traffic (a client pinned to it, a "
            "runaway stream); the whole tier above it is a takeover larger than PLAN.md plans.",
            'During a failover, read PLAN.md\'s "During a planned failover, expect" line for '
            "this alert: if it says the takeover fires it, this is that, and it ends about a "
            "window after the failed pod's replacement serves.",
            "A tier whose pods stay near their cap needs more replicas (tiers.<tier>.replicas); "
            "raising tiers.<tier>.egress raises the cap and, by default, this threshold too.",
        ),
        annotations=ctx.annotations(
            "InferenceBandwidthHigh",
            "Pod {{ $labels.pod }} sends more than its tier's threshold",
            f"Egress of {{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}} "
            f"(tier {ctx.tier_of()}) has stayed above its tier's threshold for "
            f"{units.prom_duration(cfg.for_)}. Thresholds per pod: {said} "
            f"(spec.alerts.{KEY}; by default {float(cfg.share):.0%} of the tier's egress "
            "per pod, what its QoS cap lets it send).",
        ),
    )
    alert.cases.extend(rate.cases(ctx, alert, cfg, per_pod=True, thresholds=each))
    return alert


LOW = 0.8  # an explicit threshold below this share of a tier's egress pages on a takeover


def problems(spec: Any) -> list[Problem]:
    """Warnings on thresholds the spec sets (``spec``: its ``spec`` section): one that a
    tier's pods cannot reach, or one far enough below their egress that a normal takeover
    at the cap pages."""
    cfg: TierRateAlert = settings(spec.alerts, SETTINGS)
    out: list[Problem] = []
    for name, tier in spec.tiers.items():
        if not tier.replicas or not tier.egress_bps:
            continue
        path: tuple[str, ...]
        if name in cfg.thresholds:
            value, path = cfg.thresholds[name], ("spec", "alerts", KEY, "thresholds", name)
        elif cfg.threshold is not None:
            value, path = cfg.threshold, ("spec", "alerts", KEY, "threshold")
        else:
            continue
        cap = min(tier.egress_bps, spec.network.link)
        said, most = f"{units.human_bits(value)} for the {name} tier", units.human_bits(cap)
        if value >= cap:
            why = f"can never fire: a {name} pod sends at most {most} (its egress, the link)"
        elif value < LOW * cap:
            why = f"is below {LOW:.0%} of its egress per pod ({most}): a takeover at it pages"
        else:
            continue
        out.append((path, f"{said} {why}"))
    return out
