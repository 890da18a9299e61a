"""StandbyServingOldWeights: a tier's engines serve an older generation than its volume
holds.

Only for tiers whose engines reload (``reload.api`` other than restart): after a verified
swap the weight-sync Job asks every ready pod to load the new generation and pushes, next
to the generation on disk (``standbyc_weights_generation``), the generation every pod
confirmed (``standbyc_weights_served_generation``) and how many did not
(``standbyc_weights_reload_failed_pods``). While a pod has not loaded it, the served
generation stays the one the whole tier last confirmed, below the one on disk.
"""

from __future__ import annotations

from compiler import names, units
from compiler.alerts.base import OTHER_NAMESPACE, Alert, Case, Context, Expect, Series, selector

KEY = "weightsNotServed"  # its settings in the spec: alerts.weightsNotServed
RATE = False
HELD = 7  # the generation on disk in the alert's tests


def build(ctx: Context) -> Alert | None:
    reported = ctx.reported()
    tiers = [t.name for t in ctx.plan.sync.tiers if t.reload is not None]
    if reported is None or not tiers:
        return None
    _, pushed = reported
    cfg = ctx.plan.alerts.weights_not_served
    sel = selector(pushed, {"tier": "|".join(tiers)})
    by = "max by (namespace, standbyc_spec, tier)"
    alert = Alert(
        name="StandbyServingOldWeights",
        expr=(
            "# the generation every engine pod of the tier confirmed, below the one the "
            "weight-sync Job swapped in on its volume\n"
            f"{by} ({ctx.last_pushed(names.SERVED_METRIC, sel)})\n"
            "< on (namespace, standbyc_spec, tier)\n"
            f"{by} ({ctx.last_pushed(names.WEIGHTS_METRIC, sel)})\n"
        ),
        for_ms=cfg.for_,
        labels={**ctx.base_labels, "severity": cfg.severity},
        annotations=ctx.annotations(
            "StandbyServingOldWeights",
            f"Tier {{{{ $labels.tier }}}} of {ctx.plan.name} serves older weights than it holds",
            "The {{ $labels.tier }} engines of "
            f"{{{{ $labels.namespace }}}}/{ctx.plan.name} have served generation "
            f"{{{{ $value }}}}, older than the one on their volume, for "
            f"{units.prom_duration(cfg.for_)}: {_failed(ctx)} pod(s) did not load the new "
            "generation when the weight-sync Job asked (its log names them and why). A "
            "failover to them would serve stale weights; restart those pods, or rerun the Job.",
        ),
    )
    timeline = ctx.timeline(0, cfg.for_)
    steps, tier = timeline.steps, tiers[0]

    def served(t: str, gen: int, failed: int, **other: str) -> list[Series]:
        labels = {**pushed, "tier": t, **other}
        return [
            ctx.pushed(t, HELD, steps, **other),
            Series(f"{names.SERVED_METRIC}{selector(labels)}", f"{gen}x{steps}"),
            Series(f"{names.RELOAD_FAILED_METRIC}{selector(labels)}", f"{failed}x{steps}"),
        ]

    foreign = [
        *served(tier, HELD - 1, 1, namespace=OTHER_NAMESPACE),
        *served(tier, HELD - 1, 1, standbyc_spec="another-spec"),
    ]
    others = [s for t in tiers[1:] for s in served(t, HELD, 0)]
    firing = ctx.expected(alert, {**pushed, "tier": tier})
    firing["exp_labels"].pop("job")
    firing["exp_annotations"]["description"] = (
        firing["exp_annotations"]["description"]
        .replace("{{ $value }}", str(HELD - 1))
        .replace(_failed(ctx), "1")
    )
    alert.cases.extend(
        ctx.fires_then_silent(
            alert,
            timeline,
            (
                "StandbyServingOldWeights fires while a pod has not loaded the generation on disk",
                [*served(tier, HELD - 1, 1), *others, *foreign],
                [firing],
            ),
            (
                "StandbyServingOldWeights stays silent when every pod serves it",
                [*served(tier, HELD, 0), *others, *foreign],
            ),
        )
    )
    # The Pushgateway restarts once the alert fires. The weight-report CronJob pushes both
    # series again after the longest wait of its schedule: it keeps firing. Nothing
    # pushes again: it resolves once the bridge runs out.
    restart = timeline.fire
    end = max(restart + ctx.report_gap_ms + 2 * cfg.for_, ctx.forgotten_at(restart))

    def restarted(t: str, gen: int, failed: int, back: bool) -> list[Series]:
        def again(value: int) -> str:
            return ctx.pushgateway_restart(value, restart, end, back=back)

        return [
            ctx.pushed(t, HELD, 0, values=again(HELD)),
            ctx.pushed(t, gen, 0, values=again(gen), metric=names.SERVED_METRIC),
            ctx.pushed(t, failed, 0, values=again(failed), metric=names.RELOAD_FAILED_METRIC),
        ]

    def every(back: bool) -> list[Series]:
        return [
            *restarted(tier, HELD - 1, 1, back),
            *(s for t in tiers[1:] for s in restarted(t, HELD, 0, back)),
            *foreign,
        ]

    gone = ctx.forgotten_at(restart)
    alert.cases.extend(
        [
            Case(
                "StandbyServingOldWeights keeps firing through a Pushgateway restart when the "
                f"weight-report CronJob pushes again {units.prom_duration(ctx.report_gap_ms)} "
                "later",
                every(True),
                [Expect(t, [firing]) for t in ctx.spread(timeline.fire, end)],
            ),
            Case(
                "StandbyServingOldWeights resolves when the Pushgateway restarted and nothing "
                f"pushed again for {units.prom_duration(ctx.plan.sync.report_bridge_ms)}",
                every(False),
                [Expect(gone - ctx.eval_ms, [firing]), Expect(gone, [])],
            ),
        ]
    )
    return alert


def _failed(ctx: Context) -> str:
    """An annotation fragment: the pods of the alert's tier that did not load it (the
    last count pushed, like the alert's own series)."""
    sel = "{namespace=%q, standbyc_spec=%q, tier=%q}"
    query = ctx.last_pushed(names.RELOAD_FAILED_METRIC, sel)
    return (
        f'{{{{ with printf "{query}" $labels.namespace $labels.standbyc_spec $labels.tier '
        "| query }}{{ . | first | value }}{{ end }}"
    )
