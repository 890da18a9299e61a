"""FailoverBandwidthSpike: the tiers together send more than the threshold."""

from __future__ import annotations

from compiler import units
from compiler.alerts import rate
from compiler.alerts.base import Alert, Context
from compiler.spec import rate_alert

KEY = "failoverSpike"  # its settings in the spec: alerts.failoverSpike
SETTINGS = rate_alert(
    KEY, threshold=50 * 10**9, window=2 * 60_000, for_=60_000, severity="critical"
)


def build(ctx: Context) -> Alert | None:
    cfg = ctx.settings(SETTINGS)
    tiers = ctx.standby_tiers
    bits = units.human_bits(cfg.threshold)
    alert = Alert(
        name="FailoverBandwidthSpike",
        expr=rate.expression(ctx, cfg, KEY, per_pod=False),
        for_ms=cfg.for_,
        keep_firing_ms=rate.keep_firing(ctx, cfg),
        labels={**ctx.base_labels, "severity": cfg.severity},
        annotations=ctx.annotations(
            "FailoverBandwidthSpike",
            f"Standby tiers of {ctx.plan.name} send more than {bits} together",
            f"The {'/'.join(tiers)} tiers in {{{{ $labels.namespace }}}} have sent more than "
            f"{bits} ({units.human_bytes_per_second(cfg.threshold / 8)}) in total for "
            f"{units.prom_duration(cfg.for_)}; a failover or weight sync is saturating "
            "the link.",
        ),
    )
    alert.cases.extend(rate.cases(ctx, alert, cfg, per_pod=False))
    return alert
