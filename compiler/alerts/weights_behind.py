"""StandbyWeightsBehind: a tier reports an older weights generation."""

from __future__ import annotations

from compiler import names, units
from compiler.alerts.base import OTHER_NAMESPACE, OTHER_TIER, Alert, Context, selector

KEY = "weightsBehind"  # its settings in the spec: alerts.weightsBehind
RATE = False


def build(ctx: Context) -> Alert | None:
    reported = ctx.reported()
    if reported is None:
        return None
    sync_tiers, pushed = reported
    cfg = ctx.plan.alerts.weights_behind
    generation = ctx.plan.generation
    sel = selector(pushed, {"tier": "|".join(sync_tiers)})
    alert = Alert(
        name="StandbyWeightsBehind",
        expr=(
            f"# generation {generation} is spec.model.generation; the weight-sync Jobs "
            "push what each tier holds\n"
            f"max by (namespace, standbyc_spec, tier) (\n"
            f"  {names.WEIGHTS_METRIC}{sel}\n"
            f") < {generation}\n"
        ),
        for_ms=cfg.for_,
        labels={**ctx.base_labels, "severity": cfg.severity},
        annotations=ctx.annotations(
            "StandbyWeightsBehind",
            f"Tier {{{{ $labels.tier }}}} of {ctx.plan.name} holds an older model",
            "The {{ $labels.tier }} standbys of "
            f"{{{{ $labels.namespace }}}}/{ctx.plan.name} have held weights generation "
            f"{{{{ $value }}}}, below {generation}, for {units.prom_duration(cfg.for_)}; a "
            "failover to them would serve stale weights.",
        ),
    )
    timeline = ctx.timeline(0, cfg.for_)
    steps, tier = timeline.steps, sync_tiers[-1]
    foreign = [
        ctx.pushed(tier, generation - 1, steps, namespace=OTHER_NAMESPACE),
        ctx.pushed(tier, generation - 1, steps, standbyc_spec="another-spec"),
        ctx.pushed(OTHER_TIER, generation - 1, steps),
    ]
    behind = {"namespace": ctx.ns, "tier": tier}
    firing = ctx.expected(alert, behind)
    firing["exp_annotations"]["description"] = firing["exp_annotations"]["description"].replace(
        "{{ $value }}", str(generation - 1)
    )
    current = [ctx.pushed(t, generation, steps) for t in sync_tiers if t != tier]
    alert.cases.extend(
        ctx.fires_then_silent(
            alert,
            timeline,
            (
                "StandbyWeightsBehind fires for a tier one generation behind",
                [ctx.pushed(tier, generation - 1, steps), *current, *foreign],
                [firing],
            ),
            (
                "StandbyWeightsBehind stays silent when every tier is current",
                [ctx.pushed(tier, generation, steps), *current, *foreign],
            ),
        )
    )
    return alert
