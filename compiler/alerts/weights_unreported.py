"""StandbyWeightsUnreported: a sync tier reports no weights generation."""

from __future__ import annotations

from compiler import names, units
from compiler.alerts.base import OTHER_NAMESPACE, Alert, Context, selector

KEY = "weightsUnreported"  # its settings in the spec: alerts.weightsUnreported
RATE = False


def build(ctx: Context) -> Alert | None:
    reported = ctx.reported()
    if reported is None:
        return None
    sync_tiers, pushed = reported
    cfg = ctx.plan.alerts.weights_unreported
    # absent() keeps the labels of its equality matchers: one alert per silent tier.
    parts = [f"absent({names.WEIGHTS_METRIC}{selector({**pushed, 'tier': t})})" for t in sync_tiers]
    alert = Alert(
        name="StandbyWeightsUnreported",
        expr=(
            "# no weight-sync Job of the tier has pushed what it holds (or the "
            "Pushgateway is not scraped)\n" + "\nor\n".join(parts) + "\n"
        ),
        for_ms=cfg.for_,
        labels={**ctx.base_labels, "severity": cfg.severity},
        annotations=ctx.annotations(
            "StandbyWeightsUnreported",
            f"Tier {{{{ $labels.tier }}}} of {ctx.plan.name} reports no weights generation",
            "No weights generation of the {{ $labels.tier }} standbys of "
            f"{{{{ $labels.namespace }}}}/{ctx.plan.name} has reached Prometheus for "
            f"{units.prom_duration(cfg.for_)}: their weight-sync Job has not run or could "
            "not push, or the Pushgateway is not scraped with honor_labels: true.",
        ),
    )
    timeline = ctx.timeline(0, cfg.for_)
    steps, tier = timeline.steps, sync_tiers[0]
    others = [ctx.pushed(t, ctx.plan.generation, steps) for t in sync_tiers if t != tier]
    foreign = [
        ctx.pushed(tier, ctx.plan.generation, steps, namespace=OTHER_NAMESPACE),
        ctx.pushed(tier, ctx.plan.generation, steps, standbyc_spec="another-spec"),
    ]
    silent_tier = {**pushed, "tier": tier}
    alert.cases.extend(
        ctx.fires_then_silent(
            alert,
            timeline,
            (
                "StandbyWeightsUnreported fires for a tier that never reported",
                [*others, *foreign],
                [ctx.expected(alert, silent_tier)],
            ),
            (
                "StandbyWeightsUnreported stays silent when every tier reports",
                [ctx.pushed(tier, ctx.plan.generation, steps), *others, *foreign],
            ),
        )
    )
    return alert
