"""The failover plan: each failure mode's timeline against the objective, what the takeover
sends against its caps, a new generation's rollout per sync tier, the design's claim
computed, and what would meet a missed objective."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from compiler import units
from compiler.failover import advice, compare, rollout, takeover
from compiler.failover.inputs import Inputs
from compiler.failover.modes import Mode, timeline
from compiler.failover.numbers import Num


@dataclass(frozen=True)
class FailoverPlan:
    modes: tuple[Mode, ...]
    egress: takeover.Egress
    rollouts: tuple[rollout.TierTime, ...]
    comparison: compare.Comparison
    rto_ms: int | None
    advice: tuple[str, ...]

    @property
    def slowest(self) -> Mode:
        """The mode that serves last (one that never serves by itself first)."""
        return max(self.modes, key=_serving_or_never)

    @property
    def seconds(self) -> float | None:
        """The slowest mode's time to serving again (None: one never serves by itself)."""
        return self.slowest.serving

    @property
    def met(self) -> bool | None:
        """None: no objective, and the takeover can carry the traffic."""
        if not self.egress.fits:
            return False
        if self.rto_ms is None:
            return None
        return self.seconds is not None and self.seconds * 1000 <= self.rto_ms

    def verdict(self) -> str:
        s = self.slowest
        when = (
            "never serves again by itself" if s.serving is None
            else f"serves again after {units.human_seconds(s.serving)}"
        )  # fmt: skip
        slowest = f"{s.title} {when}"
        if not self.egress.fits:
            return f"objective missed: {self.egress.verdict()}"
        if self.rto_ms is None:
            return f"slowest: {slowest}; no objective set (failover.rto)"
        rto = units.prom_duration(self.rto_ms)
        if self.met:
            return f"objective met: every failure mode serves again within failover.rto {rto} " \
                   f"(slowest: {slowest})"  # fmt: skip
        return f"objective missed: {slowest}, over failover.rto {rto}"

    def to_json(self) -> dict[str, Any]:
        e = self.egress
        return {
            "seconds": None if self.seconds is None else round(self.seconds, 3),
            "rtoSeconds": None if self.rto_ms is None else self.rto_ms / 1000,
            "met": self.met,
            "verdict": self.verdict(),
            "modes": [
                {
                    "mode": m.mode,
                    "outOfServiceSeconds": round(m.out_of_service, 3),
                    "detachedSeconds": round(m.detached, 3),
                    "servingSeconds": None if m.serving is None else round(m.serving, 3),
                    "replacedSeconds": None if m.replaced is None else round(m.replaced, 3),
                    "steps": [{"name": st.name, "at": round(st.at, 3), "how": st.how}
                              for st in m.steps],
                }
                for m in self.modes
            ],
            "takeover": {
                "tier": e.tier,
                "perPodBitsPerSecond": round(e.per_pod, 3),
                "burstPerPodBitsPerSecond": round(e.burst_per_pod, 3),
                "capBitsPerSecond": e.cap,
                "fits": e.fits,
                "burstFits": e.burst_fits,
                "handshakeBytes": e.handshake_bytes,
            },
            "rollout": [
                {"tier": r.tier, "seconds": round(r.seconds, 3), "storageBytes": r.storage_bytes,
                 "steps": [{"name": st.name, "at": round(st.at, 3), "how": st.how}
                           for st in r.steps]}
                for r in self.rollouts
            ],
            "comparison": {
                "withPeakBitsPerSecond": round(self.comparison.with_peak, 3),
                "withoutPeakBitsPerSecond": round(self.comparison.without_peak, 3),
                "withBytes": self.comparison.with_bytes,
                "withoutBytes": self.comparison.without_bytes,
                "peakCut": round(self.comparison.peak_cut, 4),
                "bytesCut": round(self.comparison.bytes_cut, 4),
            },
            "designCopy": {
                "bytes": self.comparison.copies,
                "gigabits": round(self.comparison.copies * 8 / 1e9, 2),
                "seconds": round(self.comparison.copy_seconds, 3),
            },
            "advice": list(self.advice),
        }  # fmt: skip


def _serving_or_never(m: Mode) -> float:
    return float("inf") if m.serving is None else m.serving


def assess(i: Inputs) -> FailoverPlan:
    """The plan of ``i``, without advice (what each lever is judged by)."""
    e = takeover.egress(i)
    return FailoverPlan(
        modes=tuple(timeline(i, m) for m in i.modes),
        egress=e,
        rollouts=tuple(rollout.tier(i, t) for t in i.rollout.tiers),
        comparison=compare.compare(i, e),
        rto_ms=i.rto_ms,
        advice=(),
    )


def analyse(i: Inputs) -> FailoverPlan:
    plan = assess(i)
    if plan.met is not False:
        return plan
    return FailoverPlan(plan.modes, plan.egress, plan.rollouts, plan.comparison, plan.rto_ms,
                        tuple(advice.levers(i, plan, assess)))  # fmt: skip


def numbers(i: Inputs) -> list[tuple[str, Num]]:
    """Every input number the plan rests on, named as PLAN.md lists them."""
    c, p, cl, t, r = i.cluster, i.probe, i.clients, i.takeover, i.rollout
    out = [
        ("network link", i.link),
        ("serving egress of one failed pod", t.serving_egress),
        ("answers in flight retried", t.retried),
        ("readiness probe period", p.period),
        ("readiness probe timeout", p.timeout),
        ("container exit noticed", c.container_exit),
        ("node monitor grace period", c.node_grace),
        ("node monitor period", c.node_period),
        ("endpoint update", c.endpoint_update),
        ("pod eviction from a lost node", c.pod_eviction),
    ]
    if cl.protocol == "grpc":
        out += [("gRPC keepalive time", cl.keepalive_time),
                ("gRPC keepalive timeout", cl.keepalive_timeout),
                ("gRPC reconnect backoff", cl.backoff_initial),
                ("gRPC connect timeout", cl.connect_timeout)]  # fmt: skip
    else:
        out.append(("HTTP read timeout", cl.read_timeout))
    out += [
        ("handshake per reconnect", cl.handshake),
        ("engine start", i.engine_start),
        ("weights claim rate per client", i.claim_rate),
        ("engine reload", i.reload),
        ("publish rate", r.publish_rate),
        ("a sync's receive rate", r.receive_rate),
        ("rebuild rate", r.rebuild_rate),
        ("a new standby's swap rate", r.place_rate),
        ("trigger wait", r.trigger_wait),
        ("Job start", r.job_start),
    ]
    if r.sign_rate is not None:
        out.append(("signing rate", r.sign_rate))
    if r.verify_rate is not None:
        out.append(("signature hash rate", r.verify_rate))
    for x in r.tiers:
        if x.measured_sync is not None:
            out.append((f"tier {x.tier}: its sync", x.measured_sync))
        if x.measured_reload is not None:
            out.append((f"tier {x.tier}: its engines' reload", x.measured_reload))
    return out
