"""What would meet a missed objective: only levers that change a compiled object (a tier's
replicas or egress cap, the clients' keepalive, a Job that keeps a tier's weights) or an
input the user really controls (the engine's readiness probe, the cluster's node grace).
Each lever is judged by planning again with it, alone and with all the others."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

from compiler import units
from compiler.failover.inputs import Inputs
from compiler.failover.modes import Mode
from compiler.failover.numbers import Num
from compiler.failover.takeover import Egress


class Judged(Protocol):
    """What a lever is judged by: a plan (``compiler.failover.plan.FailoverPlan``)."""

    @property
    def modes(self) -> tuple[Mode, ...]: ...
    @property
    def egress(self) -> Egress: ...
    @property
    def rto_ms(self) -> int | None: ...
    @property
    def met(self) -> bool | None: ...
    @property
    def seconds(self) -> float | None: ...
    def verdict(self) -> str: ...


Assess = Callable[[Inputs], Judged]
# Candidate settings, most lenient first: a lever asks no more than it must.
KEEPALIVES_S = (45, 30, 20, 15, 10, 5)
PERIODS_S = (10, 5, 3, 2, 1)
GRACES_S = (40, 30, 20, 15, 10)


@dataclass(frozen=True)
class Lever:
    text: str
    apply: Callable[[Inputs], Inputs]
    instead: bool = False  # an alternative to the lever before it: left out of "all of these"


def _declared(seconds: float, where: str) -> Num:
    return Num(seconds, "s", "declared", where)


def _serves_in_time(plan: Judged, mode: str) -> bool:
    m = next(m for m in plan.modes if m.mode == mode)
    return m.serving is not None and (plan.rto_ms is None or m.serving * 1000 <= plan.rto_ms)


def _first(
    values: tuple[int, ...],
    make: Callable[[int], Inputs],
    check: Callable[[Judged], bool],
    assess: Assess,
) -> int:
    for v in values:
        if check(assess(make(v))):
            return v
    return values[-1]


def _set_keepalive(i: Inputs, k: int) -> Inputs:
    cl = i.clients
    timeout = min(cl.keepalive_timeout.value, k / 2)
    return replace(i, clients=replace(
        cl, keepalive_time=_declared(k, "connectionPool.grpc.keepaliveTime"),
        keepalive_timeout=_declared(timeout, "connectionPool.grpc.keepaliveTimeout")))  # fmt: skip


def _keepalive(i: Inputs, mode: str, assess: Assess) -> Lever:
    k = _first(KEEPALIVES_S, lambda v: _set_keepalive(i, v),
               lambda p: _serves_in_time(p, mode), assess)  # fmt: skip
    return Lever(
        f"notice a silent peer sooner: connectionPool.grpc.keepaliveTime {k}s (and "
        f"serverMinPingInterval at most {k}s, keepaliveTimeout under it), emitted as "
        "grpc.keepalive_time_ms and the server's grpc.http2.min_ping_interval_without_data_ms",
        lambda x: _set_keepalive(x, k),
    )


def _set_period(i: Inputs, period: int) -> Inputs:
    return replace(i, probe=replace(i.probe, period=_declared(period, "healthChecks.interval")))


def _probe(i: Inputs, assess: Assess) -> Lever:
    p = _first(PERIODS_S, lambda v: _set_period(i, v),
               lambda plan: _serves_in_time(plan, "hang"), assess)  # fmt: skip
    return Lever(
        f"take a hung engine out of its Service sooner: your Deployment's readinessProbe "
        f"periodSeconds {p} (failureThreshold {i.probe.failure_threshold}), and "
        f"healthChecks.interval {p}s to match",
        lambda x: _set_period(x, p),
    )


def _set_grace(i: Inputs, g: int) -> Inputs:
    return replace(i, cluster=replace(
        i.cluster, node_grace=_declared(g, "failover.cluster.nodeMonitorGracePeriod")))  # fmt: skip


def _node_grace(i: Inputs, assess: Assess) -> Lever:
    g = _first(GRACES_S, lambda v: _set_grace(i, v),
               lambda p: _serves_in_time(p, "nodeLoss"), assess)  # fmt: skip
    return Lever(
        f"mark a lost node sooner, cluster-wide: kube-controller-manager "
        f"--node-monitor-grace-period {g}s (at least 4 x the kubelet's "
        f"nodeStatusUpdateFrequency), and failover.cluster.nodeMonitorGracePeriod {g}s",
        lambda x: _set_grace(x, g),
    )


def _weights(i: Inputs) -> Lever:
    t = i.takeover.tier
    return Lever(
        f"keep the {t} tier's weights on its claim (weightSync.tiers lists {t}, and its Job "
        "has run once): then it is Ready before a failure and serves at once, even a "
        "generation behind",
        lambda x: replace(x, takeover=replace(x.takeover, weights="behind")),
    )


def _budget(i: Inputs, extra: float) -> str:
    """What a lever adds to the link budget (every tier's replicas x egress), said when it
    would no longer fit network.link (admit.py then refuses the spec)."""
    after = i.tiers_egress_bps + extra
    if after <= i.link.value:
        return ""
    return (
        f"; the tiers' egress then adds up to {units.human_bits(after)}, over network.link "
        f"{units.human_bits(i.link.value)}: the link must grow too"
    )


def _capacity(i: Inputs) -> list[Lever]:
    t = i.takeover
    need = t.failed * t.serving_egress.value
    pods = math.ceil(need / t.cap_bps)
    cap = math.ceil(need / t.replicas / 1e9) * 10**9
    return [
        Lever(
            f"give the {t.tier} tier {pods} replicas (tiers.{t.tier}.replicas): each then "
            f"carries {units.human_bits(need / pods)} of the failed pods' traffic under its "
            f"{units.human_bits(t.cap_bps)} cap" + _budget(i, (pods - t.replicas) * t.cap_bps),
            lambda x: replace(x, takeover=replace(x.takeover, replicas=pods)),
        ),
        Lever(
            f"or raise tiers.{t.tier}.egress to {units.human_bits(cap)} (the pods' "
            "kubernetes.io/egress-bandwidth annotation)"
            + _budget(i, (cap - t.cap_bps) * t.replicas),
            lambda x: replace(x, takeover=replace(x.takeover, cap_bps=cap)),
            instead=True,
        ),
    ]


def _mode_levers(i: Inputs, plan: Judged, assess: Assess) -> list[Lever]:
    out: list[Lever] = []
    for m in plan.modes:
        if _serves_in_time(plan, m.mode):
            continue
        if i.takeover.weights == "missing":
            out.append(_weights(i))
        elif i.clients.protocol == "grpc" and m.mode != "crash":
            out.append(_keepalive(i, m.mode, assess))
            if m.mode == "nodeLoss":
                out.append(_node_grace(i, assess))
        elif m.mode == "hang":
            out.append(_probe(i, assess))
        elif m.mode == "nodeLoss":
            out.append(_node_grace(i, assess))
    unique: dict[str, Lever] = {}
    for lever in out:
        unique.setdefault(lever.text, lever)
    return list(unique.values())


def levers(i: Inputs, plan: Judged, assess: Assess) -> list[str]:
    found = (_capacity(i) if not plan.egress.fits else []) + _mode_levers(i, plan, assess)
    if not found:
        return ["nothing standbyc or the spec controls shortens it: raise failover.rto, or "
                "change what the crash itself costs"]  # fmt: skip
    lines = []
    for lever in found:
        after = assess(lever.apply(i))
        lines.append(f"{lever.text}: {_outcome(after)}")
    both = i
    for lever in found:
        if not lever.instead:
            both = lever.apply(both)
    lines.append(f"with all of these: {_outcome(assess(both))}")
    return lines


def _outcome(plan: Judged) -> str:
    if plan.met is False:
        return f"still missed ({plan.verdict().removeprefix('objective missed: ')})"
    s = plan.seconds
    return "meets the objective" + ("" if s is None else f" (slowest {units.human_seconds(s)})")
