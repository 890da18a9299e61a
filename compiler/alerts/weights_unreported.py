"""StandbyWeightsUnreported: a sync tier reports no weights generation."""

from __future__ import annotations

from compiler import names, units
from compiler.alerts.base import OTHER_NAMESPACE, Alert, Context, selector

KEY = "weightsUnreported"  # its settings in the spec: alerts.weightsUnreported
RATE = False
REPORTED = 7  # the generation the test's Jobs report


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
    # absent() reads whether a series is there, not its value: any generation will do, and
    # one that is not the spec's keeps this test the same for every generation (specs that
    # differ only in names and generation share its run in the gate).
    gen = REPORTED
    others = [ctx.pushed(t, gen, steps) for t in sync_tiers if t != tier]
    foreign = [
        ctx.pushed(tier, gen, steps, namespace=OTHER_NAMESPACE),
        ctx.pushed(tier, gen, steps, standbyc_spec="another-spec"),
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
                [ctx.pushed(tier, gen, steps), *others, *foreign],
            ),
        )
    )
    return alert
