"""StandbyWeightsRefused: a tier's weight-sync Job refused a generation's signature.

Only with ``weightSync.verify``: each Job verifies the generation it staged (OpenSSF Model
Signing) before the swap, and pushes beside the generation it holds the one it refused
(``standbyc_weights_refused_generation``; 0 when it refused none). A refusal keeps the
tier on what it held, so ``StandbyWeightsBehind`` would say only "behind", and later;
this one pages at once, because unsigned weights in the store mean someone other than the
publisher wrote it (or the publisher did not sign).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from compiler import names
from compiler.alerts.base import OTHER_NAMESPACE, Alert, Case, Context, Expect, Series, selector
from compiler.alerts.outages import pushgateway_restart, restart_window
from compiler.spec import duration_alert

KEY = "weightsRefused"  # its settings in the spec: alerts.weightsRefused
REFUSED = 1  # the generation refused in the tests: the lowest there is, so "> 0" is pinned
SETTINGS = duration_alert(KEY, for_=60_000, severity="critical")


def build(ctx: Context) -> Alert | None:
    reported = ctx.reported()
    if reported is None or ctx.plan.sync.verify is None:
        return None
    tiers, pushed = reported
    cfg = ctx.settings(SETTINGS)
    sel = selector(pushed, {"tier": "|".join(tiers)})
    alert = Alert(
        name="StandbyWeightsRefused",
        expr=(
            "# the generation whose signature the tier's weight-sync Job last refused (0: "
            "none)\n"
            "max by (namespace, standbyc_spec, tier) (\n"
            f"  {ctx.last_pushed(names.REFUSED_METRIC, sel)}\n"
            ") > 0\n"
        ),
        for_ms=cfg.for_,
        labels={**ctx.base_labels, "severity": cfg.severity},
        actions=(
            "Do not sign or republish to silence it: find who wrote the generation to the "
            "store, and whether the publisher signed it with the key or identity in "
            "spec.weightSync.verify.",
            f"kubectl -n {ctx.ns} logs job/<the tier's weight-sync Job>: it says why the "
            "signature was refused.",
            "The tier keeps serving what it held; once a correctly signed generation is "
            "published, the next sync takes it.",
        ),
        annotations=ctx.annotations(
            "StandbyWeightsRefused",
            f"Tier {{{{ $labels.tier }}}} of {ctx.plan.name} refused unsigned weights",
            "The {{ $labels.tier }} weight-sync Job of "
            f"{{{{ $labels.namespace }}}}/{ctx.plan.name} refused generation {{{{ $value }}}}: "
            "its signature does not verify with spec.weightSync.verify (missing, another "
            "key or identity, a file changed after signing, or another generation's). The "
            "tier keeps the generation it held and no engine loaded the refused one. Someone "
            "other than the publisher may have written the store, or the publisher did not "
            "sign: the Job's log says what failed.",
        ),
    )
    timeline = ctx.timeline(0, cfg.for_)
    steps, tier = timeline.steps, tiers[0]

    def refused(t: str, gen: int, values: str | None = None, **other: str) -> Series:
        return ctx.pushed(t, gen, steps, values=values, metric=names.REFUSED_METRIC, **other)

    foreign = [
        refused(tier, REFUSED, namespace=OTHER_NAMESPACE),
        refused(tier, REFUSED, standbyc_spec="another-spec"),
    ]
    others = [refused(t, 0) for t in tiers[1:]]
    firing = ctx.expected(alert, {**pushed, "tier": tier})
    firing["exp_labels"].pop("job")
    firing["exp_annotations"]["description"] = firing["exp_annotations"]["description"].replace(
        "{{ $value }}", str(REFUSED)
    )
    alert.cases.extend(
        ctx.fires_then_silent(
            alert,
            timeline,
            (
                "StandbyWeightsRefused fires when a tier refused a generation's signature",
                [refused(tier, REFUSED), *others, *foreign],
                [firing],
            ),
            (
                "StandbyWeightsRefused stays silent while no tier refused one",
                [refused(tier, 0), *others, *foreign],
            ),
        )
    )
    alert.cases.extend(_later(ctx, alert, firing, tiers, foreign))
    return alert


def _later(
    ctx: Context, alert: Alert, firing: dict[str, Any], tiers: list[str], foreign: list[Series]
) -> list[Case]:
    """After it fires: a sync that verifies ends it at once; a Pushgateway restart does not,
    while the weight-report CronJob pushes the refusal again, and ends it once the bridge
    runs out when nothing does."""
    fire, end = restart_window(ctx, alert.for_ms)
    tier, good = tiers[0], fire // ctx.scrape_ms + 1  # the scrape that sees the next sync's 0
    long = end // ctx.scrape_ms + 2

    def series(t: str, gen: int, values: str) -> Series:
        return ctx.pushed(t, gen, 0, values=values, metric=names.REFUSED_METRIC)

    fixed = [series(tier, REFUSED, f"{REFUSED}x{good - 1} 0x{long - good}")]
    others = [series(t, 0, f"0x{long}") for t in tiers[1:]]

    def restarted(again: Callable[[int], str]) -> list[Series]:
        refused = [
            series(tier, REFUSED, again(REFUSED)),
            *(series(t, 0, again(0)) for t in tiers[1:]),
        ]
        return [*refused, *foreign]

    resolved = ctx.grid(good * ctx.scrape_ms)
    return [
        Case(
            "StandbyWeightsRefused resolves once the tier's next sync verifies its generation",
            [*fixed, *others, *foreign],
            [Expect(fire, [firing]), Expect(resolved, [])],
        ),
        *pushgateway_restart(ctx, alert, firing, restarted),
    ]
