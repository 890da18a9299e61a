"""FailoverBandwidthSpike: the tiers together send more than the threshold."""

from __future__ import annotations

from compiler import units
from compiler.alerts.base import Alert, Context, indent

KEY = "failoverSpike"  # its settings in the spec: alerts.failoverSpike
RATE = True  # a threshold over a rate window


def build(ctx: Context) -> Alert | None:
    cfg = ctx.plan.alerts.failover_spike
    tiers = [t.name for t in ctx.plan.tiers]
    threshold = cfg.threshold
    bits = units.human_bits(threshold)
    alert = Alert(
        name="FailoverBandwidthSpike",
        expr=(
            f"# bytes/s x 8 = bit/s, summed over tiers {', '.join(tiers)}; "
            f"threshold {bits} (spec.alerts.failoverSpike)\n"
            f"sum by (namespace) (\n{indent(ctx.egress_bytes(cfg.window))}\n"
            "  * on (namespace, pod)\n"
            f"{indent(ctx.pod_tiers(tiers))}\n"
            f") * 8 > {units.float_literal(threshold)}\n"
        ),
        for_ms=cfg.for_,
        labels={**ctx.base_labels, "severity": cfg.severity},
        annotations=ctx.annotations(
            "FailoverBandwidthSpike",
            f"Standby tiers of {ctx.plan.name} send more than {bits} together",
            f"The {'/'.join(tiers)} tiers in {{{{ $labels.namespace }}}} have sent more than "
            f"{bits} ({units.human_bytes_per_second(threshold / 8)}) in total for "
            f"{units.prom_duration(cfg.for_)}; a failover or weight sync is saturating "
            "the link.",
        ),
    )
    alert.cases.extend(ctx.rate_cases(alert, cfg, per_pod=False))
    return alert
