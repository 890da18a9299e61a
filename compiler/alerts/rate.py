"""What the two bandwidth alerts share: their expression, and promtool cases fed with
series shaped as a real cluster exports them.

Cases, each one failing when the rule departs from the spec in one way:
- *fires exactly* ``for`` after the traffic crosses the threshold by 2 % (a changed
  threshold or ``for`` moves or stops it), and *stays silent* 2 % below;
- *window*: traffic ramping from idle reads above the threshold at an evaluation set by
  the rate window, as rate() reads it on or off the scrape grid (half the window fires an
  evaluation early, twice the window late);
- *keeps firing*, as one alert with the same labels, through one missed kubelet scrape and
  one missed kube-state-metrics scrape (which only ``keep_firing_for`` bridges: traffic
  over the threshold reads below it for an evaluation), a counter that restarts, and
  the pod relabelled to another tier (one the spec gives no replicas, where there is one)
  while the two kube-state-metrics replicas disagree for a scrape;
- *ends, then fires again*: the kubelet or kube-state-metrics down for longer than the
  window and keep_firing_for leaves no data (no page), and the alert fires ``for`` after
  the exporter is back.

Every standby tier value matches (hot, warm, cold), also one without replicas, so a pod
promoted into it mid-incident stays seen; another app's pod with a tier label never does.

Interfaces: a pod's egress is split over ``eth0`` and a second interface (``net1``, as
Multus adds); loopback carries far more and must never count.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import Any

from compiler import units
from compiler.alerts import extrapolation
from compiler.alerts.base import (
    MARGIN,
    OTHER_NAMESPACE,
    OTHER_TIER,
    Alert,
    Case,
    Context,
    Expect,
    Series,
    counter_values,
    indent,
)
from compiler.spec import RateAlert

LOUD = 1.5  # traffic that must not match: other namespace, other tier
LOOPBACK = 4.0  # loopback traffic, never counted
INTERFACES = (("eth0", 0.75), ("net1", 0.25))


def keep_firing(ctx: Context, cfg: RateAlert) -> int:
    """keep_firing_for: the spec's, or two scrape intervals, so one missed scrape (which
    leaves a rate window short of its first sample for an evaluation) cannot resolve an
    alert mid-incident."""
    return 2 * ctx.scrape_ms if cfg.keep_firing_for is None else cfg.keep_firing_for


def egress_bits(ctx: Context, window_ms: int, tiers: list[str], *, per_pod: bool) -> str:
    """Egress in bit/s of the engine's pods in ``tiers``: per pod, or summed (label
    namespace). What the bandwidth alerts compare, and what the dashboard draws."""
    joined = (
        f"(\n{indent(ctx.egress_bytes(window_ms))}\n"
        "  * on (namespace, pod)\n"
        f"{indent(ctx.pod_tiers(tiers))}\n)"
    )
    return f"{joined} * 8" if per_pod else f"sum by (namespace) {joined} * 8"


def expression(ctx: Context, cfg: RateAlert, key: str) -> str:
    """The standby tiers' egress, summed per namespace, over ``cfg.threshold``."""
    tiers = ctx.standby_tiers
    bits = units.human_bits(cfg.threshold)
    egress = egress_bits(ctx, cfg.window, tiers, per_pod=False)
    head = (
        f"# bytes/s x 8 = bit/s, summed over tiers {', '.join(tiers)}; "
        f"threshold {bits} (spec.alerts.{key})\n"
    )
    return f"{head}{egress} > {units.float_literal(cfg.threshold)}\n"


def per_tier_expression(
    ctx: Context, cfg: RateAlert, key: str, thresholds: Mapping[str, int]
) -> str:
    """Each pod's egress over its tier's threshold: one branch per standby tier, each with
    the same labels (namespace, pod), so a pod relabelled mid-incident stays one alert."""
    said = ", ".join(f"{t} {units.human_bits(thresholds[t])}" for t in ctx.standby_tiers)
    head = f"# bytes/s x 8 = bit/s per pod, over its tier's threshold ({said}; spec.alerts.{key})\n"
    branches = [
        f"{egress_bits(ctx, cfg.window, [t], per_pod=True)} > {units.float_literal(thresholds[t])}"
        for t in ctx.standby_tiers
    ]
    return head + "\nor\n".join(branches) + "\n"


def gauge(steps: int, on: int = 0, off: int | None = None, stale: int | None = None) -> str:
    """promtool values of a 0/1 gauge: absent before step ``on``, 1 from there, a staleness
    marker at ``off`` (the series is gone) or at ``stale`` (one missed scrape)."""
    tokens = ["_"] * on
    end = steps if off is None else off
    run = 0
    for i in range(on, end):
        if i == stale:
            tokens += ([f"1x{run - 1}" if run > 1 else "1"] if run else []) + ["stale"]
            run = 0
            continue
        run += 1
    if run:
        tokens.append(f"1x{run - 1}" if run > 1 else "1")
    if off is not None:
        tokens.append("stale")
    return " ".join(tokens)


class Scenario:
    """One case's traffic: the matching pods, their counters and kube_pod_labels."""

    def __init__(
        self,
        ctx: Context,
        cfg: RateAlert,
        steps: int,
        *,
        per_pod: bool,
        tier: str | None = None,
        threshold: float | None = None,
    ) -> None:
        """``tier``: the one pod's tier (per pod; default the first the spec gives replicas);
        ``threshold``: what ``per_step`` scales (default the alert's)."""
        self.ctx, self.cfg, self.steps = ctx, cfg, steps
        tiers = ctx.tiers
        self.tiers = tiers
        self.threshold = cfg.threshold if threshold is None else threshold
        self.pods = (
            [("standby-0", tier or tiers[0])]
            if per_pod
            else [(f"standby-{i}", tiers[i % len(tiers)]) for i in range(2)]
        )

    def per_step(self, factor: float) -> float:
        """Bytes one matching pod sends in one scrape interval at ``factor`` x threshold."""
        return self.threshold / 8 * factor / len(self.pods) * self.ctx.scrape_ms / 1000

    def counters(
        self,
        pod: str,
        incs: list[float],
        namespace: str | None = None,
        *,
        stale: frozenset[int] = frozenset(),
        reset_at: int | None = None,
    ) -> list[Series]:
        out = [
            self.ctx.sandbox_counter(
                pod,
                interface,
                counter_values([i * share for i in incs], stale=stale, reset_at=reset_at),
                namespace,
            )
            for interface, share in INTERFACES
        ]
        loud = self.per_step(LOOPBACK) * len(self.pods)
        lo = counter_values([loud] * len(incs), stale=stale)
        return [*out, self.ctx.sandbox_counter(pod, "lo", lo, namespace)]

    def constant(self, factor: float) -> list[float]:
        return [self.per_step(factor)] * (self.steps - 1)

    def foreign(self, on: int) -> list[Series]:
        """Loud pods that must never match: the same name in another namespace, a pod of
        the engine in another tier, and another app's pod with a standby tier label."""
        loud = self.constant(LOUD * len(self.pods))
        labels = gauge(self.steps, on)
        tier = self.tiers[0]
        out = [
            *self.counters(self.pods[0][0], loud, OTHER_NAMESPACE),
            *self.ctx.labels_series(self.pods[0][0], tier, labels, OTHER_NAMESPACE),
            *self.counters("other-tier-0", loud),
            *self.ctx.labels_series("other-tier-0", OTHER_TIER, labels),
        ]
        if self.ctx.engine_labels:
            out += self.counters("other-app-0", loud)
            out += self.ctx.labels_series("other-app-0", tier, labels, selector_labels=False)
        return out


def cases(
    ctx: Context,
    alert: Alert,
    cfg: RateAlert,
    *,
    per_pod: bool,
    thresholds: Mapping[str, int] | None = None,
) -> list[Case]:
    """The cases of a bandwidth alert; ``thresholds``: per pod, each standby tier's (the
    crossing is played for a pod of each, the other cases for the first tier's pods)."""
    if thresholds is not None:
        cfg = cfg.model_copy(update={"threshold": thresholds[ctx.tiers[0]]})
    s_ms = ctx.scrape_ms
    # kube_pod_labels appears at t0, once the rate window is full of samples,
    # so the expression turns true exactly at t0.
    t0 = ctx.grid(cfg.window + 2 * s_ms)
    on = t0 // s_ms
    timeline = ctx.timeline(t0, cfg.for_)
    base = Scenario(ctx, cfg, timeline.steps, per_pod=per_pod)

    identity = {"namespace": ctx.ns} | ({"pod": base.pods[0][0]} if per_pod else {})

    def firing(tier: str | None = None) -> list[dict[str, Any]]:
        """The one alert expected; per pod, its annotation names the tier."""
        return [ctx.expected(alert, identity, (tier or base.pods[0][1]) if per_pod else None)]

    def at(sc: Scenario, factor: float) -> list[Series]:
        out: list[Series] = []
        for pod, tier in sc.pods:
            out += sc.counters(pod, sc.constant(factor))
            out += ctx.labels_series(pod, tier, gauge(sc.steps, on))
        return out + sc.foreign(on)

    out: list[Case] = []
    crossed = [None] if thresholds is None else ctx.standby_tiers
    for tier in crossed:
        sc = base
        if tier is not None and thresholds is not None:
            sc = Scenario(ctx, cfg, timeline.steps, per_pod=True, tier=tier,
                          threshold=thresholds[tier])  # fmt: skip
        bits = units.human_bits(sc.threshold)
        who = "" if tier is None else f" for a {tier} pod"
        out += ctx.fires_then_silent(
            alert,
            timeline,
            (
                f"{alert.name} fires {units.prom_duration(cfg.for_)} after crossing "
                f"{bits} by {MARGIN:.0%}{who}",
                at(sc, 1 + MARGIN),
                firing(tier),
            ),
            (f"{alert.name} stays silent {MARGIN:.0%} below {bits}{who}", at(sc, 1 - MARGIN)),
        )
    window = _window_case(ctx, alert, cfg, firing(), per_pod=per_pod)
    if window is not None:
        out.append(window)
    out += _holding_cases(ctx, alert, cfg, t0, timeline.fire, per_pod=per_pod, firing=firing,
                          thresholds=thresholds)  # fmt: skip
    out += [
        _outage_case(
            ctx, alert, cfg, t0, timeline.fire, exporter=exporter, per_pod=per_pod, firing=firing()
        )
        for exporter in ("kubelet", "kube-state-metrics")
    ]
    return out


def _outage_case(
    ctx: Context,
    alert: Alert,
    cfg: RateAlert,
    t0: int,
    fire: int,
    *,
    exporter: str,
    per_pod: bool,
    firing: list[dict[str, Any]],
) -> Case:
    """The alert fires; then ``exporter`` is down (a restart, an eviction) for longer than
    the rate window and keep_firing_for. With no data the alert ends, and it fires again
    ``for`` after the exporter is back (the counters kept counting meanwhile)."""
    s_ms, keep = ctx.scrape_ms, keep_firing(ctx, cfg)
    on = t0 // s_ms
    down_at = math.ceil(fire / s_ms) + 1  # the first scrape that fails
    quiet = ctx.grid((down_at - 1) * s_ms + cfg.window + keep + 2 * ctx.eval_ms)
    back_at = quiet // s_ms + 2  # the first scrape that succeeds again
    # rate() reads a window that holds samples since the return only, by a share of the
    # traffic: twice the threshold reads over it once the window is half full, and the
    # whole window is more than enough.
    again = ctx.grid(back_at * s_ms + cfg.window + cfg.for_) + 2 * ctx.eval_ms
    steps = again // s_ms + 2
    sc = Scenario(ctx, cfg, steps, per_pod=per_pod)
    gap = frozenset(range(down_at, back_at))
    # Traffic well over the threshold, so that any rate() reading over two samples fires.
    loud = sc.constant(2.0)
    inputs: list[Series] = []
    for pod, tier in sc.pods:
        inputs += sc.counters(pod, loud, stale=gap if exporter == "kubelet" else frozenset())
        labels = gauge(steps, on)
        if exporter == "kube-state-metrics":
            labels = (
                f"_x{on} 1x{down_at - on - 1} stale _x{back_at - down_at - 2} "
                f"1x{steps - back_at - 1}"
            )
        inputs += ctx.labels_series(pod, tier, labels)
    down = units.prom_duration((back_at - down_at) * s_ms)
    return Case(
        f"{alert.name} ends while the {exporter} is down for {down} and fires again "
        f"{units.prom_duration(cfg.for_)} after it is back",
        [*inputs, *sc.foreign(on)],
        [Expect(fire, firing), Expect(quiet, []), Expect(again, firing)],
    )


# How far from the threshold a ramp's reading must be at the window case's checks.
WINDOW_MARGIN = 0.03


def _window_case(
    ctx: Context,
    alert: Alert,
    cfg: RateAlert,
    expected: list[dict[str, Any]],
    *,
    per_pod: bool,
) -> Case | None:
    """Traffic ramps from idle to f x threshold; the rule must fire exactly ``for`` after
    the first evaluation k at which rate() over its window reads above the threshold.

    Over half the window rate() reaches the ramp's level sooner, over twice the window
    later. f and k are chosen by reading the ramp as rate() does (``extrapolation``, both
    window conventions, evaluations on or off the scrape grid) so that the rule reads 3 %
    below the threshold at k - 1 and 3 % above from k until it fires, while over half the
    window it reads 3 % above from k - 1 on (it would fire an evaluation early) and over
    twice the window 3 % below at k (it would fire late). None when no ramp separates them.
    """
    s_ms, e_ms, w = ctx.scrape_ms, ctx.eval_ms, cfg.window
    for_ms = ctx.grid(cfg.for_)
    idle = math.ceil(2 * w / s_ms) + 2  # idle samples: every window starts out idle
    last = idle * s_ms + 2 * w + for_ms + 2 * e_ms  # the latest firing time considered
    # One threshold-interval of traffic per scrape interval from sample ``idle`` on: read as
    # a rate and scaled by the interval, 1.0 is the ramp's full speed at f = 1.
    unit = [(i * s_ms, 1e12 + max(0, i - idle)) for i in range(last // s_ms + 2)]
    scale = s_ms / 1000
    cache: dict[tuple[int, int], tuple[float, float]] = {}

    def reading(window: int, k: int) -> tuple[float, float]:
        if (window, k) not in cache:
            lo, hi = extrapolation.bounds(unit, k * e_ms, window)
            cache[window, k] = (lo * scale, hi * scale)
        return cache[window, k]

    best: tuple[float, int, float] | None = None  # (f range's width as a ratio, k, f)
    for k in range(1, (last - for_ms) // e_ms + 1):
        fire = k * e_ms + for_ms
        after = min(reading(w, j)[0] for j in range(k, fire // e_ms + 1))
        early = min(reading(w // 2, j)[0] for j in range(k - 1, fire // e_ms))
        if after <= 0 or early <= 0:
            continue
        low = (1 + WINDOW_MARGIN) / min(after, early)
        high = (1 - WINDOW_MARGIN) / max(reading(w, k - 1)[1], reading(2 * w, k)[1])
        if low <= high and (best is None or high / low > best[0]):
            best = (high / low, k, math.sqrt(low * high))
    if best is None:
        return None
    _, k, factor = best
    fire = k * e_ms + for_ms
    steps = fire // s_ms + 2
    scenario = Scenario(ctx, cfg, steps, per_pod=per_pod)
    incs = [0.0] * idle + [scenario.per_step(factor)] * (steps - 1 - idle)
    inputs: list[Series] = []
    for pod, tier in scenario.pods:
        inputs += scenario.counters(pod, incs)
        inputs += ctx.labels_series(pod, tier, gauge(steps))
    return Case(
        f"{alert.name} fires {units.prom_duration(cfg.for_)} after a ramp from idle to "
        f"{factor:.2f} x {units.human_bits(cfg.threshold)} reads above it over the "
        f"{units.prom_duration(w)} window (half the window: an evaluation sooner; twice: later)",
        inputs,
        [Expect(fire - e_ms, []), Expect(fire, expected)],
    )


def _holding_cases(
    ctx: Context,
    alert: Alert,
    cfg: RateAlert,
    t0: int,
    fire: int,
    *,
    per_pod: bool,
    firing: Callable[[str | None], list[dict[str, Any]]],
    thresholds: Mapping[str, int] | None = None,
) -> list[Case]:
    """Cases that must keep firing from ``fire`` on; kube_pod_labels appears at ``t0``."""
    s_ms, e_ms = ctx.scrape_ms, ctx.eval_ms
    on = t0 // s_ms
    event = math.ceil(fire / s_ms) + 1  # the scrape after the alert fired
    end = ctx.grid(event * s_ms + cfg.window + 2 * s_ms)
    steps = end // s_ms + 2
    sc = Scenario(ctx, cfg, steps, per_pod=per_pod)
    # A missed scrape at the start of the window leaves rate() extrapolating over half an
    # interval instead of one and a half: it reads (W - 1.5 S)/W of the true rate for an
    # evaluation. The traffic sits halfway between the threshold and the rate that reading
    # would need, so only keep_firing_for holds the alert through it.
    holding = (1 + cfg.window / (cfg.window - 1.5 * s_ms)) / 2
    hold = sc.constant(holding)
    evals = range(fire, end + 1, e_ms)
    out: list[Case] = []

    def case(name: str, inputs: list[Series], tier_at: dict[int, str] | None = None) -> Case:
        checks = [Expect(t, firing((tier_at or {}).get(t))) for t in evals]
        return Case(name, inputs, checks)

    if keep_firing(ctx, cfg):
        inputs: list[Series] = []
        for pod, tier in sc.pods:
            inputs += sc.counters(pod, hold, stale=frozenset({event}))
            first, second = ctx.labels_series(pod, tier, gauge(steps, on))
            inputs += [Series(first.series, gauge(steps, on, stale=event + 1)), second]
        out.append(
            case(
                f"{alert.name} keeps firing through a missed kubelet scrape and a missed "
                "kube-state-metrics scrape",
                inputs,
            )
        )
    inputs = []
    for pod, tier in sc.pods:
        inputs += sc.counters(pod, hold, reset_at=event)
        inputs += ctx.labels_series(pod, tier, gauge(steps, on))
    out.append(case(f"{alert.name} keeps firing through a counter reset", inputs))

    # Relabelled into a tier the spec gives no replicas when there is one (a promotion the
    # spec did not plan for must not hide the pod), else from the last tier to the first.
    unplanned = [t for t in ctx.standby_tiers if t not in sc.tiers]
    old, new = sc.tiers[-1], (unplanned or sc.tiers)[0]
    if old != new:
        if thresholds is not None:  # over the threshold of either tier
            most = max(thresholds[old], thresholds[new])
            sc = Scenario(ctx, cfg, steps, per_pod=per_pod, threshold=most)
        pod = sc.pods[0][0]
        switch = (event, event + 1)  # replica 0 sees the relabel one scrape before replica 1
        inputs = []
        for p, tier in sc.pods:
            inputs += sc.counters(p, sc.constant(holding))
            if p != pod:
                inputs += ctx.labels_series(p, tier, gauge(steps, on))
        before = ctx.labels_series(pod, old, [gauge(steps, on, off=sw) for sw in switch])
        after = ctx.labels_series(pod, new, [gauge(steps, sw) for sw in switch])
        inputs += before + after
        tier_at = {
            t: "/".join(sorted({new if sw * s_ms <= t else old for sw in switch})) for t in evals
        }
        out.append(
            case(
                f"{alert.name} keeps firing as one alert while {pod} is relabelled "
                f"{old} -> {new} and the kube-state-metrics replicas disagree for a scrape",
                inputs,
                tier_at if per_pod else None,
            )
        )
    return out
