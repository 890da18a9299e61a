"""StandbyWeightsBehind: a tier reports an older weights generation than the spec wants.

The wanted generation (``spec.model.generation``) is recorded in the rule group
(``standbyc:weights_generation:wanted``) and the alert compares with that series, so the
alert's rule, and its tests, do not change from one generation to the next: the gate runs
them once for every spec that differs only in names and generation, and the record's own
test checks that it records the spec's generation.
"""

from __future__ import annotations

from collections.abc import Callable

from compiler import names, units
from compiler.alerts.base import (
    OTHER_NAMESPACE,
    OTHER_TIER,
    Alert,
    Context,
    Record,
    Series,
    selector,
)
from compiler.alerts.outages import pushgateway_restart, restart_window
from compiler.spec import duration_alert

KEY = "weightsBehind"  # its settings in the spec: alerts.weightsBehind
WANTED = 7  # the generation the alert's tests want (any will do: the record is tested apart)
SETTINGS = duration_alert(KEY, for_=15 * 60_000, severity="warning")


def build(ctx: Context) -> Alert | None:
    reported = ctx.reported()
    if reported is None:
        return None
    sync_tiers, pushed = reported
    cfg = ctx.settings(SETTINGS)
    spec = {"namespace": ctx.ns, "standbyc_spec": ctx.plan.name}
    generation = ctx.plan.generation
    record = Record(names.WEIGHTS_WANTED, f"vector({generation})", spec, generation)
    sel = selector(pushed, {"tier": "|".join(sync_tiers)})
    alert = Alert(
        name="StandbyWeightsBehind",
        expr=(
            f"# {names.WEIGHTS_WANTED} is spec.model.generation; the weight-sync Jobs push "
            "what each tier holds\n"
            "max by (namespace, standbyc_spec, tier) (\n"
            f"  {ctx.last_pushed(names.WEIGHTS_METRIC, sel)}\n"
            ")\n"
            "< on (namespace, standbyc_spec) group_left ()\n"
            f"  {record.series}\n"
        ),
        for_ms=cfg.for_,
        labels={**ctx.base_labels, "severity": cfg.severity},
        actions=(
            f"kubectl -n {ctx.ns} get jobs -l {names.TIER_LABEL}=<tier>: has the tier's "
            "weight-sync Job for this generation run, and did it succeed "
            "(WeightSyncJobFailed)?",
            "If no Job ran: the spec's new generation has not been synced to the cluster "
            "(Argo CD: the app's last sync; the schedule trigger: the CronJob's next run).",
            "Until it catches up, a failover to this tier serves the older generation.",
        ),
        annotations=ctx.annotations(
            "StandbyWeightsBehind",
            f"Tier {{{{ $labels.tier }}}} of {ctx.plan.name} holds an older model",
            "The {{ $labels.tier }} standbys of "
            f"{{{{ $labels.namespace }}}}/{ctx.plan.name} have held weights generation "
            f"{{{{ $value }}}}, below {_wanted()}, for {units.prom_duration(cfg.for_)}; a "
            "failover to them would serve stale weights.",
        ),
        records=(record,),
    )
    _cases(ctx, alert, spec, sync_tiers)
    return alert


def _cases(ctx: Context, alert: Alert, spec: dict[str, str], sync_tiers: list[str]) -> None:
    """The last sync tier one generation behind fires, every tier current does not; and
    through a Pushgateway restart."""
    timeline = ctx.timeline(0, alert.for_ms)
    steps, tier = timeline.steps, sync_tiers[-1]
    wanted = [
        _wanted_series(spec, WANTED, steps),
        # Another spec in the namespace wants a newer generation: not this spec's business.
        _wanted_series({**spec, "standbyc_spec": "another-spec"}, WANTED + 5, steps),
    ]
    foreign = [
        ctx.pushed(tier, WANTED - 1, steps, namespace=OTHER_NAMESPACE),
        ctx.pushed(tier, WANTED - 1, steps, standbyc_spec="another-spec"),
        ctx.pushed(OTHER_TIER, WANTED - 1, steps),
    ]
    behind = {"namespace": ctx.ns, "tier": tier}
    firing = ctx.expected(alert, behind)
    firing["exp_annotations"]["description"] = (
        firing["exp_annotations"]["description"]
        .replace("{{ $value }}", str(WANTED - 1))
        .replace(_wanted(), str(WANTED))
    )
    current = [ctx.pushed(t, WANTED, steps) for t in sync_tiers if t != tier]
    alert.cases.extend(
        ctx.fires_then_silent(
            alert,
            timeline,
            (
                "StandbyWeightsBehind fires for a tier one generation behind",
                [ctx.pushed(tier, WANTED - 1, steps), *current, *foreign, *wanted],
                [firing],
            ),
            (
                "StandbyWeightsBehind stays silent when every tier is current",
                [ctx.pushed(tier, WANTED, steps), *current, *foreign, *wanted],
            ),
        )
    )
    # Nothing pushes again after the restart: it resolves once the bridge runs out (and
    # StandbyWeightsUnreported takes over).
    long = restart_window(ctx, alert.for_ms)[1] // ctx.scrape_ms + 2
    wanted_long = [Series(w.series, f"{w.values.partition('x')[0]}x{long}") for w in wanted]
    held = [(tier, WANTED - 1), *((t, WANTED) for t in sync_tiers if t != tier)]

    def restarted(values: Callable[[int], str]) -> list[Series]:
        pushed = [ctx.pushed(t, g, 0, values=values(g)) for t, g in held]
        return [*pushed, *foreign, *wanted_long]

    alert.cases.extend(pushgateway_restart(ctx, alert, firing, restarted))


def _wanted() -> str:
    """An annotation fragment: the generation recorded for the alert's spec."""
    query = f"{names.WEIGHTS_WANTED}{{namespace=%q, standbyc_spec=%q}}"
    return (
        f'{{{{ with printf "{query}" $labels.namespace $labels.standbyc_spec | query }}}}'
        "{{ . | first | value }}{{ end }}"
    )


def _wanted_series(labels: dict[str, str], generation: int, steps: int) -> Series:
    """The recorded series, as the alert's tests feed it (they do not load the record)."""
    return Series(names.WEIGHTS_WANTED + selector(labels), f"{generation}x{steps}")
