"""During a planned failover, expect: the pages the failover raises by itself, from when to
when, so an on-call engineer tells them from a second problem. A bandwidth alert compares a
rate over its window: after the takeover's traffic starts at ``E`` bit/s, the rate passes a
threshold ``T`` about ``window x T / E`` later, and the alert fires ``for`` after that; it
ends about a window after the traffic goes back to the failed pod's replacement."""

from __future__ import annotations

from dataclasses import dataclass

from compiler import units
from compiler.failover.plan import FailoverPlan


@dataclass(frozen=True)
class Watch:
    """A bandwidth alert of the spec, as the failover meets it."""

    alert: str
    per_pod: bool  # each standby pod's egress; else the standby tiers' together
    threshold: float  # bit/s
    window_s: float
    for_s: float
    tier: str | None = None  # per pod: the takeover tier, whose threshold this is


def _when(plan: FailoverPlan, w: Watch, level: float) -> str:
    parts = []
    for m in plan.modes:
        if m.serving is None:
            parts.append(f"{m.title}: once the takeover tier serves")
            continue
        fires = m.serving + w.window_s * w.threshold / level + w.for_s
        ends = (
            "until its hung pod is restarted"
            if m.replaced is None
            else f"until about {units.human_seconds(m.replaced + w.window_s)}"
        )
        parts.append(f"{m.title}: from about {units.human_seconds(fires)} {ends}")
    return "; ".join(parts)


def line(plan: FailoverPlan, w: Watch) -> str:
    e = plan.egress
    steady = min(e.per_pod, e.cap) if w.per_pod else min(e.per_pod, e.cap) * e.replicas
    burst = min(e.burst_per_pod, e.cap) if w.per_pod else min(e.burst_per_pod, e.cap) * e.replicas
    pod = f"each {w.tier} pod" if w.tier else "each standby pod"
    what = pod if w.per_pod else "the standby tiers together"
    head = (
        f"{w.alert} ({what} above {units.human_bits(w.threshold)} for "
        f"{units.human_seconds(w.for_s)}): the takeover sends {units.human_bits(steady)}"
    )
    if steady > w.threshold:
        return f"{head}, so it fires by itself ({_when(plan, w, steady)} after the failure)"
    if burst > w.threshold:
        return (
            f"{head} ({units.human_bits(burst)} while the retried answers are sent again): it "
            f"fires only if those last longer than its for"
        )
    return f"{head}: it stays silent; if it fires, more than this failover is sending"


def quiet(weights: str) -> str:
    """The alerts a failover of serving pods does not raise."""
    before = (
        f"; the takeover tier's weights are {weights}, so StandbyWeightsBehind may already "
        "fire: that began before the failover"
        if weights != "current"
        else ""
    )
    return (
        "HotTierBelowReplicas, StandbyTierLabelsMissing, WeightSyncJobFailed and the weights "
        "alerts: a failover of serving pods raises none of them (a lost node that also ran "
        "standby pods does); if one fires, it is a second problem" + before
    )
