"""InferenceBandwidthHigh: a standby pod sends more than the threshold."""

from __future__ import annotations

from compiler import units
from compiler.alerts.base import Alert, Context, indent

KEY = "bandwidthHigh"  # its settings in the spec: alerts.bandwidthHigh
RATE = True  # a threshold over a rate window


def build(ctx: Context) -> Alert | None:
    cfg = ctx.plan.alerts.bandwidth_high
    tiers = [t.name for t in ctx.plan.tiers]
    threshold = cfg.threshold
    bits = units.human_bits(threshold)
    alert = Alert(
        name="InferenceBandwidthHigh",
        expr=(
            f"# bytes/s x 8 = bit/s; threshold {bits} (spec.alerts.bandwidthHigh)\n"
            f"(\n{indent(ctx.egress_bytes(cfg.window))}\n"
            f"  * on (namespace, pod) group_left ({ctx.tier_key})\n"
            f"{indent(ctx.pod_tiers(tiers))}\n"
            f") * 8 > {units.float_literal(threshold)}\n"
        ),
        for_ms=cfg.for_,
        labels={**ctx.base_labels, "severity": cfg.severity},
        annotations=ctx.annotations(
            "InferenceBandwidthHigh",
            f"Pod {{{{ $labels.pod }}}} sends more than {bits}",
            f"Egress of {{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}} "
            f"(tier {{{{ $labels.{ctx.tier_key} }}}}) has stayed above {bits} "
            f"({units.human_bytes_per_second(threshold / 8)}) for "
            f"{units.prom_duration(cfg.for_)}.",
        ),
    )
    alert.cases.extend(ctx.rate_cases(alert, cfg, per_pod=True))
    return alert
