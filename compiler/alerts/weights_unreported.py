"""StandbyWeightsUnreported: a sync tier reports no weights generation."""

from __future__ import annotations

from compiler import names, units
from compiler.alerts.base import OTHER_NAMESPACE, Alert, Case, Context, Expect, Series, selector
from compiler.spec import duration_alert

KEY = "weightsUnreported"  # its settings in the spec: alerts.weightsUnreported
REPORTED = 7  # the generation the test's Jobs report
RESTART_MS = 4 * 60_000  # when the Pushgateway restarts in the cases (any time will do)
SETTINGS = duration_alert(KEY, for_=30 * 60_000, severity="warning")


def build(ctx: Context) -> Alert | None:
    reported = ctx.reported()
    if reported is None:
        return None
    sync_tiers, pushed = reported
    cfg = ctx.settings(SETTINGS)
    # absent_over_time() keeps the labels of its equality matchers: one alert per tier.
    parts = [
        ctx.none_pushed(names.WEIGHTS_METRIC, selector({**pushed, "tier": t})) for t in sync_tiers
    ]
    alert = Alert(
        name="StandbyWeightsUnreported",
        expr=(
            "# nothing has pushed what the tier holds (its weight-sync Job, the "
            "weight-report CronJob), or the Pushgateway is not scraped\n"
            + "\nor\n".join(parts)
            + "\n"
        ),
        for_ms=cfg.for_,
        labels={**ctx.base_labels, "severity": cfg.severity},
        actions=(
            f"kubectl -n {ctx.ns} get jobs,cronjobs -l {names.TIER_LABEL}=<tier>: has the "
            "tier's weight-sync Job (or the weight-report CronJob) run since the Pushgateway "
            "started?",
            "Check that Prometheus scrapes the Pushgateway with honor_labels: true (the "
            "pushed tier label would be renamed otherwise).",
        ),
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
    alert.cases.extend(_restarts(ctx, alert, sync_tiers, pushed, foreign))
    return alert


def _restarts(
    ctx: Context, alert: Alert, tiers: list[str], pushed: dict[str, str], foreign: list[Series]
) -> list[Case]:
    """The Pushgateway restarts without persistence after RESTART_MS: every tier's series
    is gone. The weight-report CronJob pushes again within its schedule's longest wait: no
    page. Nothing pushes again: every tier pages, ``for`` after the bridge ran out."""
    for_ms, bridge = alert.for_ms, ctx.plan.sync.report_bridge_ms
    last = RESTART_MS // ctx.scrape_ms * ctx.scrape_ms
    fire = ctx.timeline(last + bridge, for_ms).fire
    end = fire + 2 * ctx.eval_ms

    def series(back: bool) -> list[Series]:
        values = ctx.pushgateway_restart(REPORTED, RESTART_MS, end, back=back)
        return [ctx.pushed(t, REPORTED, 0, values=values) for t in tiers]

    wait, for_text = units.prom_duration(ctx.report_gap_ms), units.prom_duration(for_ms)
    return [
        Case(
            "StandbyWeightsUnreported stays silent through a Pushgateway restart when the "
            f"weight-report CronJob pushes again {wait} later",
            [*series(True), *foreign],
            [Expect(t, []) for t in ctx.spread(0, end)],
        ),
        Case(
            "StandbyWeightsUnreported fires for every tier when the Pushgateway restarted and "
            f"nothing pushed again for {units.prom_duration(bridge)}, {for_text} later",
            [*series(False), *foreign],
            [
                Expect(fire - ctx.eval_ms, []),
                Expect(fire, [ctx.expected(alert, {**pushed, "tier": t}) for t in tiers]),
            ],
        ),
    ]
