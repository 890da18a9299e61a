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

from collections.abc import Callable

from compiler import names, units
from compiler.alerts.base import OTHER_NAMESPACE, Alert, Context, Series, selector
from compiler.alerts.outages import pushgateway_restart
from compiler.spec import duration_alert

KEY = "weightsNotServed"  # its settings in the spec: alerts.weightsNotServed
HELD = 7  # the generation on disk in the alert's tests
SETTINGS = duration_alert(KEY, for_=10 * 60_000, severity="warning")


def build(ctx: Context) -> Alert | None:
    reported = ctx.reported()
    tiers = [t.name for t in ctx.plan.sync.tiers if t.reload is not None]
    if reported is None or not tiers:
        return None
    _, pushed = reported
    cfg = ctx.settings(SETTINGS)
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
        actions=(
            f"kubectl -n {ctx.ns} logs job/<the tier's weight-sync Job>: it names the pods "
            "that did not load the generation, and why.",
            "Restart those pods (they load the generation on the volume when they start), "
            "or run the Job again.",
        ),
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
    _cases(ctx, alert, pushed, tiers)
    return alert


def _cases(ctx: Context, alert: Alert, pushed: dict[str, str], tiers: list[str]) -> None:
    """A pod of the first reloading tier that did not load the generation on disk fires,
    every pod serving it does not; and through a Pushgateway restart."""
    timeline = ctx.timeline(0, alert.for_ms)
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

    def restarted(t: str, gen: int, failed: int, again: Callable[[int], str]) -> list[Series]:
        return [
            ctx.pushed(t, HELD, 0, values=again(HELD)),
            ctx.pushed(t, gen, 0, values=again(gen), metric=names.SERVED_METRIC),
            ctx.pushed(t, failed, 0, values=again(failed), metric=names.RELOAD_FAILED_METRIC),
        ]

    def every(again: Callable[[int], str]) -> list[Series]:
        return [
            *restarted(tier, HELD - 1, 1, again),
            *(s for t in tiers[1:] for s in restarted(t, HELD, 0, again)),
            *foreign,
        ]

    alert.cases.extend(pushgateway_restart(ctx, alert, firing, every))


def _failed(ctx: Context) -> str:
    """An annotation fragment: the pods of the alert's tier that did not load it (the
    last count pushed, like the alert's own series)."""
    sel = "{namespace=%q, standbyc_spec=%q, tier=%q}"
    query = ctx.last_pushed(names.RELOAD_FAILED_METRIC, sel)
    return (
        f'{{{{ with printf "{query}" $labels.namespace $labels.standbyc_spec $labels.tier '
        "| query }}{{ . | first | value }}{{ end }}"
    )
