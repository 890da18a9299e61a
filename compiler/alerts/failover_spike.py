"""FailoverBandwidthSpike: the tiers together send more than the threshold."""

from __future__ import annotations

from compiler import names, units
from compiler.alerts import rate
from compiler.alerts.base import Alert, Context
from compiler.spec import rate_alert

KEY = "failoverSpike"  # its settings in the spec: alerts.failoverSpike
SETTINGS = rate_alert(
    KEY, threshold=50 * 10**9, window=2 * 60_000, for_=60_000, severity="critical"
)


SATURATED = 0.8  # from this share of the link on, the text says the link is saturated


def _share(link_bps: int, threshold: int) -> str:
    """What the threshold means against the link the spec names."""
    share = f"{threshold / link_bps:.0%} of the {units.human_bits(link_bps)} link (network.link)"
    if threshold >= SATURATED * link_bps:
        return f"{share}: a failover or weight sync is saturating the link."
    return f"{share}: the link still has room, but the standbys send more than this alert allows."


def build(ctx: Context) -> Alert | None:
    cfg = ctx.settings(SETTINGS)
    bits = units.human_bits(cfg.threshold)
    alert = Alert(
        name="FailoverBandwidthSpike",
        expr=rate.expression(ctx, cfg, KEY),
        for_ms=cfg.for_,
        keep_firing_ms=rate.keep_firing(ctx, cfg),
        labels={**ctx.base_labels, "severity": cfg.severity},
        actions=(
            f"{ctx.look('Failover row')}: the standby tiers' total against this "
            "threshold and against the takeover PLAN.md expects.",
            f"Look for a weight sync running at the same time: kubectl -n {ctx.ns} get jobs "
            f"-l {names.TIER_LABEL} (each Job is limited to weightSync.bandwidthShare of its "
            "tier's egress).",
            f"Near the link ({units.human_bits(ctx.plan.link_bps)}) serving traffic suffers: "
            "hold rollouts (pause Argo CD's automated sync) until the failover is over.",
        ),
        annotations=ctx.annotations(
            "FailoverBandwidthSpike",
            f"Standby tiers of {ctx.plan.name} send more than {bits} together",
            f"The standby pods of {ctx.plan.name} in {{{{ $labels.namespace }}}} (tier"
            f"{'s' if len(ctx.tiers) > 1 else ''} {', '.join(ctx.tiers)}, and any pod "
            "relabelled into another) have sent more than "
            f"{bits} ({units.human_bytes_per_second(cfg.threshold / 8)}) in total for "
            f"{units.prom_duration(cfg.for_)}: {_share(ctx.plan.link_bps, cfg.threshold)}",
        ),
    )
    alert.cases.extend(rate.cases(ctx, alert, cfg, per_pod=False))
    return alert
