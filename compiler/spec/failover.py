"""The failover section of the spec: what a failover looks like (how many serving pods
fail, how, onto which tier, holding which weights), what it must meet, and the cluster's
own timings the plan reads. Every field here is a declared fact about the world or the
objective: none is emitted into an object, and the plan labels each as declared or
default."""

from __future__ import annotations

from fractions import Fraction
from typing import Literal

from pydantic import Field

from compiler.spec.types import (
    BitsPerSecond,
    Bytes,
    Millis,
    Model,
    Positive,
    Ratio,
    TierName,
)

FailureMode = Literal["crash", "hang", "nodeLoss"]


def _every_mode() -> list[FailureMode]:
    return ["crash", "hang", "nodeLoss"]


class ClusterTimings(Model):
    """How fast the cluster takes a failed pod out of its Service: Kubernetes' defaults
    unless your cluster sets others (the plan labels each as declared or default)."""

    container_exit: Millis = Field(
        1_000, description="the kubelet notices an exited container (its PLEG relists every 1s)"
    )
    node_monitor_grace_period: Millis = Field(
        50_000,
        description="kube-controller-manager --node-monitor-grace-period: a node that stops "
        "reporting is marked NotReady, and its pods not ready, after this (Kubernetes >= "
        "1.32: 50s)",
    )
    node_monitor_period: Millis = Field(
        5_000, description="kube-controller-manager --node-monitor-period (5s)"
    )
    endpoint_update: Millis = Field(
        2_000,
        description="from a pod marked not ready to every proxy routing around it: the "
        "EndpointSlice update, then kube-proxy (--iptables-min-sync-period 1s), ingress-nginx "
        "or the mesh applying it",
    )
    pod_eviction: Millis = Field(
        300_000,
        description="how long pods stay bound to a lost node before they are evicted and "
        "replaced (the default tolerationSeconds for node.kubernetes.io/unreachable: 300s)",
    )


class Failover(Model):
    """One failover: ``failedReplicas`` serving pods fail, the way each of ``modes`` says,
    and the ``takeover`` tier's standbys take their traffic. The plan (PLAN.md,
    ``standbyc plan``) times each mode against ``rto`` and checks the takeover's egress
    against the tier's QoS cap."""

    rto: Millis | None = Field(
        None, description="recovery time objective: from the failure to serving again"
    )
    takeover: TierName = Field("hot", description="the tier whose standbys take over")
    failed_replicas: Positive = Field(1, description="serving pods that fail at once")
    modes: list[FailureMode] = Field(
        default_factory=_every_mode,
        min_length=1,
        description="how the pods fail: crash (the process exits; its connections are reset), "
        "hang (the engine stops answering, pings included), nodeLoss (the node goes silent); "
        "the objective must hold for each",
    )
    weights: Literal["current", "behind", "missing"] = Field(
        "current",
        description="what the takeover tier holds when it happens: current or behind by a "
        "generation (either way it is Ready and serves at once: nothing in a failover starts "
        "a weight sync), or missing (it serves only once its next weight sync has run and its "
        "engines have started)",
    )
    serving_egress: BitsPerSecond | None = Field(
        None,
        description="what one serving pod sends at peak (p95): the traffic that lands on the "
        "takeover tier. Default: the takeover tier's egress cap; standbyc plan "
        "--from-prometheus measures it",
    )
    retried: Ratio = Field(
        Fraction(1),
        description="share of the failed pods' requests in flight that clients retry on the "
        "takeover tier, their answers sent again on top of the new traffic",
    )
    handshake: Bytes = Field(4096, description="bytes to re-establish one connection (TLS)")
    engine_start: Millis = Field(
        30_000,
        description="time for an engine to start, besides reading the model (the plan adds "
        "model.size at weightSync.claimReadRate)",
    )
    reload: Millis | None = Field(
        None,
        description="time for a running engine to load a new generation (a tier whose reload "
        "is not restart). Default: model.size read at weightSync.claimReadRate; the "
        "weight-sync Job reports the time its engines took (reload.seconds), and standbyc "
        "plan --from-prometheus reads it",
    )
    store_egress: BitsPerSecond | None = Field(
        None, description="egress of the weight store's server (default: network.link)"
    )
    cluster: ClusterTimings = Field(default_factory=ClusterTimings)
    strict: bool = Field(
        False,
        description="this spec's missed objective is an error: compile writes nothing and "
        "standbyc check (the pre-commit hook) fails, as with --strict",
    )
