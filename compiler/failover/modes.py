"""One failure mode, from the moment a serving pod fails to the moment its traffic is served
again, step by step from what the cluster and the compiled clients really do.

Two things move a failed pod's traffic, whichever comes first for each request:
- the Service: once the pod is marked not ready and every proxy has the new endpoints, no
  new connection reaches it (``out_of_service``);
- the clients' own connections: reset at once when the process exits, kept on a silent peer
  until a keepalive (gRPC) or read timeout (HTTP) gives up on it.

A gRPC client (the compiled service config balances round_robin over every pod's address)
keeps sending on every connection it holds, so its requests leave a failed pod when that
connection breaks. An HTTP client reaches the pods through a proxy that routes by the
Service's endpoints, so its new requests leave the pod when the Service drops it.
"""

from __future__ import annotations

from dataclasses import dataclass

from compiler import units
from compiler.failover.inputs import MODE_TITLES, Inputs
from compiler.failover.numbers import Step
from compiler.failover.rollout import full_copy_steps


@dataclass(frozen=True)
class Mode:
    mode: str  # crash | hang | nodeLoss
    steps: tuple[Step, ...]
    out_of_service: float  # the Service no longer sends it new connections
    detached: float  # the clients' connections to it are gone
    serving: float | None  # the failed pods' traffic is served again (None: not by itself)
    replaced: float | None  # the failed pods serve again themselves (None: nothing restarts them)
    replaced_how: str
    caveat: str = ""  # what the mode as timed leaves out

    @property
    def title(self) -> str:
        return MODE_TITLES[self.mode]


def _s(seconds: float) -> str:
    return units.human_seconds(seconds)


def _route(i: Inputs, mode: str) -> tuple[float, list[Step]]:
    """When the Service stops sending the failed pod new connections."""
    c, p = i.cluster, i.probe
    if mode == "crash":
        noticed = c.container_exit.value
        how = f"the kubelet sees the container exit: {c.container_exit.label()}"
    elif mode == "hang":
        noticed = p.failure_threshold * p.period.value + p.timeout.value
        how = (
            f"{p.failure_threshold} failed readiness probes ({p.threshold_source}: "
            f"healthChecks.failureThreshold) x {p.period.label()}, the last one timing out "
            f"after {p.timeout.label()}"
        )
    else:
        noticed = c.node_grace.value + c.node_period.value
        how = (
            f"the node stops reporting; kube-controller-manager marks it and its pods not "
            f"ready after {c.node_grace.label()} + up to {c.node_period.label()}"
        )
    gone = noticed + c.endpoint_update.value
    return gone, [
        Step("pod marked not ready", noticed, how),
        Step("out of the Service", gone, f"+ {c.endpoint_update.label()}"),
    ]


def _detach(i: Inputs, mode: str) -> tuple[float, Step]:
    """When the clients' own connections to the failed pod are gone."""
    cl = i.clients
    if mode == "crash":
        reset = "the process exits: the kernel resets its connections at once"
        return 0.0, Step("connections reset", 0.0, reset)
    silent = cl.silent_peer
    what = "the engine answers nothing, pings included" if mode == "hang" else "no packet back"
    return silent.value, Step(
        "connections given up", silent.value, f"{what}: clients give up after {silent.label()}"
    )


def _takeover_ready(i: Inputs, first: float) -> tuple[float | None, list[Step]]:
    t = i.takeover
    if t.weights in ("current", "behind"):
        held = "the current generation" if t.weights == "current" else "the previous generation"
        return 0.0, [Step(f"{t.tier} tier serving", 0.0,
                          f"Ready before the failure, serving {held}: nothing in a failover "
                          "starts a weight sync")]  # fmt: skip
    synced = any(r.tier == t.tier for r in i.rollout.tiers)
    if i.rollout.trigger != "schedule" or not synced:
        why = (
            "its weight-sync Job runs only when Argo CD syncs a new generation"
            if synced
            else "no weight-sync Job feeds it (weightSync.tiers)"
        )
        never = f"never within the failover: the {t.tier} tier holds no weights and {why}"
        return None, [Step(f"{t.tier} tier serving", first, never)]
    steps = full_copy_steps(i, t.tier)
    return steps[-1].at, steps


JITTER = 0.2  # gRPC's reconnect jitter (doc/connection-backoff.md): the worst wait is 1.2x
MULTIPLIER = 1.6  # gRPC's backoff multiplier


def _redial(i: Inputs, mode: str, detached: float, gone: float) -> tuple[float, str]:
    """A gRPC client redials through the Service as soon as its connection broke. Until the
    pod is out of the Service a redial may still land on it (the worst case, assumed here):
    refused at once after a crash, unanswered until the connect timeout otherwise, then a
    backoff before the next one."""
    cl = i.clients
    t, wait, tries = detached, cl.backoff_initial.value, 0
    cost = 0.0 if mode == "crash" else cl.connect_timeout.value
    while t < gone and tries < 1000:
        t += cost + min(wait, cl.backoff_max.value) * (1 + JITTER)
        wait *= MULTIPLIER
        tries += 1
    if not tries:
        return t, "the first redial reaches a ready pod: the failed one is out of the Service"
    each = "refused at once" if mode == "crash" else f"unanswered for {cl.connect_timeout.label()}"
    return t, (
        f"{tries} redial(s) may land on the failed pod before it is out of the Service, each "
        f"{each}, then a backoff from {cl.backoff_initial.label()} (x{MULTIPLIER}, "
        f"+{JITTER:.0%} jitter)"
    )


def timeline(i: Inputs, mode: str) -> Mode:
    gone, steps = _route(i, mode)
    detached, step = _detach(i, mode)
    steps.append(step)
    if i.clients.protocol == "grpc":
        moved, why = _redial(i, mode, detached, gone)
    else:
        moved = gone
        why = (
            "the proxy sends new requests by the Service's endpoints; requests in flight on "
            f"the failed pod wait {i.clients.read_timeout.label()}"
        )
    steps.append(Step("clients re-attached", moved, why))
    ready, ready_steps = _takeover_ready(i, moved)
    steps += ready_steps
    serving = None if ready is None else max(moved, ready)
    if serving is not None:
        steps.append(
            Step("served again", serving, "clients re-attached to a takeover tier that serves")
        )
    replaced, how = _replacement(i, mode)
    return Mode(mode, tuple(sorted(steps, key=lambda s: s.at)), gone, detached, serving,
                replaced, how, _caveat(i, mode))  # fmt: skip


def _caveat(i: Inputs, mode: str) -> str:
    """A hang is timed as an engine that answers nothing; one whose server still answers
    while its model is stuck is slower to leave, and says so."""
    if mode != "hang":
        return ""
    if i.clients.protocol == "grpc":
        return (
            "an engine whose server still answers pings while its model is stuck keeps its "
            "gRPC clients until the server's GOAWAY at "
            f"{i.clients.max_connection_age.label()}, its streams in flight until they end"
        )
    return (
        "an engine whose server still answers the readiness probe while its model is stuck "
        "stays in its Service: nothing takes it out but a liveness probe or a person"
    )


def _replacement(i: Inputs, mode: str) -> tuple[float | None, str]:
    """When the failed pod serves again itself, which ends the takeover."""
    c = i.cluster
    start = (
        f"a start ({i.engine_start.label()}) and the model read from the claim "
        f"({units.human_bytes(i.model_bytes)} at {i.claim_rate.label()}: {_s(i.read_seconds)})"
    )
    if mode == "crash":
        at = c.container_exit.value + i.warmup + c.endpoint_update.value
        return at, f"the kubelet restarts the container at once: {start}, then back in the Service"
    if mode == "nodeLoss":
        at = c.node_grace.value + c.node_period.value + c.pod_eviction.value + i.warmup
        return at, (
            f"its pods are evicted {c.pod_eviction.label()} after the node is marked not "
            f"ready, then scheduled elsewhere: {start} (image pulls not counted)"
        )
    return None, (
        "nothing restarts a hung engine but its own liveness probe, which the spec does not "
        "declare: the takeover carries its traffic until someone does"
    )
