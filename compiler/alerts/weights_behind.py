"""StandbyWeightsBehind: a tier reports an older weights generation than the spec wants.

The wanted generation (``spec.model.generation``) is recorded in the rule group
(``standbyc:weights_generation:wanted``) and the alert compares with that series, so the
alert's rule, and its tests, do not change from one generation to the next: the gate runs
them once for every spec that differs only in names and generation, and the record's own
test checks that it records the spec's generation.
"""

from __future__ import annotations

from compiler import names, units
from compiler.alerts.base import (
    OTHER_NAMESPACE,
    OTHER_TIER,
    Alert,
    Case,
    Context,
    Expect,
    Record,
    Series,
    selector,
)

KEY = "weightsBehind"  # its settings in the spec: alerts.weightsBehind
RATE = False
WANTED = 7  # the generation the alert's tests want (any will do: the record is tested apart)


def build(ctx: Context) -> Alert | None:
    reported = ctx.reported()
    if reported is None:
        return None
    sync_tiers, pushed = reported
    cfg = ctx.plan.alerts.weights_behind
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
    timeline = ctx.timeline(0, cfg.for_)
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
    # The Pushgateway restarts once the alert fires. The weight-report CronJob pushes
    # again after the longest wait of its schedule: the alert neither resolves nor starts
    # over. Nothing pushes again: it resolves once the bridge runs out (and
    # StandbyWeightsUnreported takes over).
    restart = timeline.fire
    end = max(restart + ctx.report_gap_ms + 2 * cfg.for_, ctx.forgotten_at(restart))
    long = end // ctx.scrape_ms + 2
    wanted_long = [Series(w.series, f"{w.values.partition('x')[0]}x{long}") for w in wanted]

    def restarted(back: bool) -> list[Series]:
        return [
            ctx.pushed(t, g, 0, values=ctx.pushgateway_restart(g, restart, end, back=back))
            for t, g in [(tier, WANTED - 1), *((t, WANTED) for t in sync_tiers if t != tier)]
        ]

    gone = ctx.forgotten_at(restart)
    alert.cases.extend(
        [
            Case(
                "StandbyWeightsBehind keeps firing through a Pushgateway restart when the "
                f"weight-report CronJob pushes again {units.prom_duration(ctx.report_gap_ms)} "
                "later",
                [*restarted(True), *foreign, *wanted_long],
                [Expect(t, [firing]) for t in ctx.spread(timeline.fire, end)],
            ),
            Case(
                "StandbyWeightsBehind resolves when the Pushgateway restarted and nothing "
                f"pushed again for {units.prom_duration(ctx.plan.sync.report_bridge_ms)}",
                [*restarted(False), *foreign, *wanted_long],
                [Expect(gone - ctx.eval_ms, [firing]), Expect(gone, [])],
            ),
        ]
    )
    return alert


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
