"""The cases every alert has for its data source being down, restarted or missing (the
README's table "What each alert does when its data is not there" quotes them, and a test
holds the table to them): kube-state-metrics down for a rollout, and a Pushgateway
restarted without persistence.

An alert on kube-state-metrics' series either stays silent while it is down
(``silent_while_ksm_down``) or ends and fires again ``for`` after it is back
(``ends_while_ksm_down``); an alert on what the weight-sync Jobs push keeps firing through
a Pushgateway restart when the weight-report CronJob pushes again, and ends once the bridge
runs out when nothing does (``pushgateway_restart``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from compiler import units
from compiler.alerts.base import KSM, Alert, Case, Context, Expect, Series, Timeline

KSM_DOWN_MS = 4 * 60_000  # a kube-state-metrics rollout or eviction, as the audit saw one
PRESENT = 4  # scrapes before the event a case plays out (pods gone, exporter down, ...)
_KSM_JOB = f'job="{KSM["job"]}"'


def _gapped(series: list[Series], values: str) -> list[Series]:
    """``series`` with every kube-state-metrics series' values replaced by ``values``."""
    return [Series(s.series, values) if _KSM_JOB in s.series else s for s in series]


def silent_while_ksm_down(
    ctx: Context,
    alert: Alert,
    watched: list[Series],
    others: list[Series],
    *,
    samples: int | None = None,
    what: str = "",
) -> Case:
    """kube-state-metrics is down for KSM_DOWN_MS after PRESENT scrapes (every series it
    exports in ``watched`` goes stale, then holds 1 again up to ``samples``; default: back
    for as many samples as the alert's fires-then-silent cases hold), ``others`` as they
    are: the alert never fires. ``what`` ends the case's name."""
    down = KSM_DOWN_MS // ctx.scrape_ms
    if samples is None:
        samples = PRESENT + down + ctx.timeline(0, alert.for_ms).steps
    gap = f"1x{PRESENT - 1} stale _x{down - 1} 1x{samples - PRESENT - down}"
    end = samples * ctx.scrape_ms
    return Case(
        f"{alert.name} stays silent while kube-state-metrics is down for "
        f"{units.prom_duration(KSM_DOWN_MS)}{what}",
        [*_gapped(watched, gap), *others],
        [Expect(ctx.grid(t), []) for t in range(0, end - ctx.scrape_ms, 60_000)],
    )


def ends_while_ksm_down(
    ctx: Context,
    alert: Alert,
    timeline: Timeline,
    firing: list[dict[str, Any]],
    inputs: Callable[[int], tuple[list[Series], list[Series]]],
) -> Case:
    """kube-state-metrics is down for KSM_DOWN_MS once the alert fires: it ends, and fires
    again ``for`` after the exporter is back. ``inputs(samples)``: the series that fire
    (their kube-state-metrics series go stale while it is down), and the others, each of
    ``samples`` samples."""
    down_at = timeline.fire // ctx.scrape_ms + 1
    back_at = down_at + KSM_DOWN_MS // ctx.scrape_ms
    again = ctx.timeline(back_at * ctx.scrape_ms, alert.for_ms).fire
    steps = again // ctx.scrape_ms + 4
    gap = f"1x{down_at - 1} stale _x{back_at - down_at - 1} 1x{steps - back_at}"
    gapped, others = inputs(steps)
    return Case(
        f"{alert.name} ends while kube-state-metrics is down for "
        f"{units.prom_duration(KSM_DOWN_MS)} and fires again "
        f"{units.prom_duration(alert.for_ms)} after it is back",
        [*_gapped(gapped, gap), *others],
        [
            Expect(timeline.fire, firing),
            Expect(ctx.grid(down_at * ctx.scrape_ms) + ctx.eval_ms, []),
            Expect(again - ctx.eval_ms, []),
            Expect(again, firing),
        ],
    )


def restart_window(ctx: Context, for_ms: int) -> tuple[int, int]:
    """When the Pushgateway restarts in ``pushgateway_restart`` (as the alert fires), and
    when its cases end."""
    fire = ctx.timeline(0, for_ms).fire
    return fire, max(fire + ctx.report_gap_ms + 2 * for_ms, ctx.forgotten_at(fire))


def pushgateway_restart(
    ctx: Context,
    alert: Alert,
    firing: dict[str, Any],
    inputs: Callable[[Callable[[int], str]], list[Series]],
) -> list[Case]:
    """The Pushgateway restarts without persistence as the alert fires. The weight-report
    CronJob pushes again after the longest wait of its schedule: the alert keeps firing,
    as one alert. Nothing pushes again: it ends once the bridge runs out.
    ``inputs(values)``: the cases' series, where ``values(generation)`` are the values of
    a pushed series that held ``generation`` before the restart."""
    fire, end = restart_window(ctx, alert.for_ms)
    gone = ctx.forgotten_at(fire)

    def restarted(back: bool) -> list[Series]:
        return inputs(lambda gen: ctx.pushgateway_restart(gen, fire, end, back=back))

    return [
        Case(
            f"{alert.name} keeps firing through a Pushgateway restart when the weight-report "
            f"CronJob pushes again {units.prom_duration(ctx.report_gap_ms)} later",
            restarted(True),
            [Expect(t, [firing]) for t in ctx.spread(fire, end)],
        ),
        Case(
            f"{alert.name} resolves when the Pushgateway restarted and nothing pushed again "
            f"for {units.prom_duration(ctx.plan.sync.report_bridge_ms)}",
            restarted(False),
            [Expect(gone - ctx.eval_ms, [firing]), Expect(gone, [])],
        ),
    ]
