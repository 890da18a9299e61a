"""InferenceBandwidthHigh: a standby pod sends more than the threshold."""

from __future__ import annotations

from compiler import units
from compiler.alerts import rate
from compiler.alerts.base import Alert, Context
from compiler.spec import rate_alert

KEY = "bandwidthHigh"  # its settings in the spec: alerts.bandwidthHigh
SETTINGS = rate_alert(
    KEY, threshold=10 * 10**9, window=5 * 60_000, for_=5 * 60_000, severity="warning"
)


def build(ctx: Context) -> Alert | None:
    cfg = ctx.settings(SETTINGS)
    bits = units.human_bits(cfg.threshold)
    alert = Alert(
        name="InferenceBandwidthHigh",
        expr=rate.expression(ctx, cfg, KEY, per_pod=True),
        for_ms=cfg.for_,
        keep_firing_ms=rate.keep_firing(ctx, cfg),
        labels={**ctx.base_labels, "severity": cfg.severity},
        annotations=ctx.annotations(
            "InferenceBandwidthHigh",
            f"Pod {{{{ $labels.pod }}}} sends more than {bits}",
            f"Egress of {{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}} "
            f"(tier {ctx.tier_of()}) has stayed above {bits} "
            f"({units.human_bytes_per_second(cfg.threshold / 8)}) for "
            f"{units.prom_duration(cfg.for_)}.",
        ),
    )
    alert.cases.extend(rate.cases(ctx, alert, cfg, per_pod=True))
    return alert
