"""The failover plan's inputs, read from an admitted spec: each number with its source
(declared when the spec writes it, else whose default it is), and what the compiled
connection-pool objects make clients do."""

from __future__ import annotations

from typing import Any

from compiler import engines
from compiler.failover import (
    Clients,
    Cluster,
    Inputs,
    Num,
    Probe,
    Rollout,
    Takeover,
    TierRollout,
    calibration,
    declared_or_default,
)
from compiler.failover.numbers import Unit
from compiler.plan.model import SyncPlan, TierPlan
from compiler.spec import StandbySpec, cron_longest_gap

# What nothing in the spec says, with whose default each is.
GRPC_BACKOFF = "gRPC's default (doc/connection-backoff.md)"
ARGOCD_RECONCILE_S = 180
JOB_START_S = 10


def _field(model: Any, name: str, alias: str, unit: Unit, default: str, *, scale: float) -> Num:
    """A spec field as a Num: ``scale`` brings its stored value to the Num's unit."""
    value = getattr(model, name)
    return declared_or_default(value / scale, unit, alias, name in model.model_fields_set,
                               default)  # fmt: skip


def _ms(model: Any, name: str, alias: str, default: str) -> Num:
    return _field(model, name, alias, "s", default, scale=1000)


def _probe(spec: StandbySpec) -> Probe:
    hc = spec.spec.health_checks
    mine = "your readinessProbe as the spec does not declare it: Kubernetes' default"
    return Probe(
        period=_ms(hc, "interval", "healthChecks.interval", f"standbyc's default, {mine} is 10s"),
        timeout=_ms(hc, "timeout", "healthChecks.timeout", "Kubernetes' default timeoutSeconds"),
        failure_threshold=hc.failure_threshold,
        threshold_source="declared" if "failure_threshold" in hc.model_fields_set else "default",
    )


def _cluster(spec: StandbySpec) -> Cluster:
    c = spec.spec.failover.cluster
    pre = "failover.cluster."
    return Cluster(
        container_exit=_ms(c, "container_exit", pre + "containerExit",
                           "the kubelet's PLEG relist period, 1s"),
        node_grace=_ms(c, "node_monitor_grace_period", pre + "nodeMonitorGracePeriod",
                       "Kubernetes' --node-monitor-grace-period since 1.32"),
        node_period=_ms(c, "node_monitor_period", pre + "nodeMonitorPeriod",
                        "Kubernetes' --node-monitor-period"),
        endpoint_update=_ms(c, "endpoint_update", pre + "endpointUpdate",
                            "EndpointSlice update and kube-proxy's 1s minimum sync"),
        pod_eviction=_ms(c, "pod_eviction", pre + "podEviction",
                         "Kubernetes' default tolerationSeconds for an unreachable node"),
    )  # fmt: skip


def _clients(spec: StandbySpec) -> Clients:
    s = spec.spec
    g, pool = s.connection_pool.grpc, "connectionPool.grpc."
    back = g.reconnect_backoff
    return Clients(
        protocol=s.engine.protocol,
        keepalive_time=_ms(g, "keepalive_time", pool + "keepaliveTime", "standbyc's default"),
        keepalive_timeout=_ms(g, "keepalive_timeout", pool + "keepaliveTimeout",
                              "standbyc's default"),
        read_timeout=_ms(s.connections, "read_timeout", "connections.readTimeout",
                         "ingress-nginx's proxy-read-timeout default"),
        backoff_initial=Num(back.initial / 1000, "s", "declared",
                            pool + "reconnectBackoff.initial") if back
        else Num(1.0, "s", "default", GRPC_BACKOFF),
        backoff_max=Num(back.max / 1000, "s", "declared", pool + "reconnectBackoff.max") if back
        else Num(120.0, "s", "default", GRPC_BACKOFF),
        connect_timeout=Num(20.0, "s", "default", "gRPC's MIN_CONNECT_TIMEOUT"),
        max_connection_age=_ms(g, "max_connection_age", pool + "maxConnectionAge",
                               "standbyc's default"),
        connections=s.connections.expected,
        handshake=_field(s.failover, "handshake", "failover.handshake", "B",
                         "a TLS 1.3 handshake with its certificates, about 4 KiB", scale=1),
    )  # fmt: skip


def _takeover(spec: StandbySpec, tier: TierPlan) -> Takeover:
    fo = spec.spec.failover
    serving = (
        Num(fo.serving_egress, "bit/s", "declared", "failover.servingEgress")
        if fo.serving_egress is not None
        else Num(tier.egress_bps, "bit/s", "default",
                 f"the {tier.name} tier's cap: a serving pod sent what a takeover pod may")
    )  # fmt: skip
    return Takeover(
        tier=tier.name,
        replicas=tier.replicas,
        cap_bps=tier.egress_bps,
        failed=fo.failed_replicas,
        serving_egress=serving,
        retried=_field(fo, "retried", "failover.retried", "share",
                       "every request in flight is retried", scale=1),
        weights=fo.weights,
        reloads=tier.reload is not None,
    )  # fmt: skip


def _rollout(spec: StandbySpec, sync: SyncPlan) -> Rollout:
    s = spec.spec
    trigger = s.weight_sync.trigger
    if trigger.type == "schedule":
        gap = cron_longest_gap(trigger.schedule)
        wait = (
            Num(gap * 60, "s", "declared", "the longest gap of weightSync.trigger.schedule")
            if gap is not None
            else Num(86_400 * 28, "s", "declared", "weightSync.trigger.schedule runs days apart")
        )
    else:
        wait = Num(ARGOCD_RECONCILE_S, "s", "default",
                   "Argo CD's timeout.reconciliation; a Git webhook makes it seconds")  # fmt: skip
    tiers = tuple(
        TierRollout(
            tier=t.name,
            replicas=t.replicas,
            sync_rate_bps=t.sync_rate_bps,
            api=None if t.reload is None else t.reload.api,
            waves=0 if t.reload is None else t.reload.waves,
            max_unavailable=0 if t.reload is None else t.reload.max_unavailable,
            serves_while_loading=t.reload is not None
            and engines.serves_while_loading(t.reload.api, t.reload.swap),
            job_deadline_s=t.job_deadline_s,
        )
        for t in sync.tiers
    )
    return Rollout(
        tiers=tiers,
        delta_bytes=int(s.model.size * s.weight_sync.expected_delta),
        trigger=trigger.type,
        trigger_wait=wait,
        job_start=Num(JOB_START_S, "s", "default",
                      "a pod scheduled with its image cached; not measured"),
        publish_rate=calibration.PUBLISH,
        sign_rate=calibration.SIGN if s.weight_sync.verify is not None else None,
        receive_rate=calibration.RECEIVE,
        rebuild_rate=calibration.REBUILD,
        place_rate=calibration.PLACE,
        verify_rate=calibration.VERIFY if s.weight_sync.verify is not None else None,
    )  # fmt: skip


def inputs(spec: StandbySpec, tiers: tuple[TierPlan, ...], sync: SyncPlan) -> Inputs:
    s = spec.spec
    fo = s.failover
    takeover = next(t for t in tiers if t.name == fo.takeover)  # admit.py made sure
    claim = _field(s.weight_sync, "claim_read_rate", "weightSync.claimReadRate", "B/s",
                   "a network file system's rate per client, as EFS gives", scale=8)  # fmt: skip
    reload = (
        Num(fo.reload / 1000, "s", "declared", "failover.reload")
        if fo.reload is not None
        else Num(
            s.model.size / claim.value,
            "s",
            claim.source,
            "model.size read at weightSync.claimReadRate",
        )
    )
    return Inputs(
        link=_field(s.network, "link", "network.link", "bit/s", "standbyc's default", scale=1),
        model_bytes=s.model.size,
        modes=tuple(dict.fromkeys(fo.modes)),
        probe=_probe(spec),
        cluster=_cluster(spec),
        clients=_clients(spec),
        takeover=_takeover(spec, takeover),
        engine_start=_ms(fo, "engine_start", "failover.engineStart",
                         "an engine's start without its weights; not measured"),
        claim_rate=claim,
        reload=reload,
        rollout=_rollout(spec, sync),
        store_egress_bps=fo.store_egress or s.network.link,
        tiers_egress_bps=sum(t.replicas * t.egress_bps for t in tiers),
        standby_replicas=sum(t.replicas for t in sync.tiers),
        rto_ms=fo.rto,
    )  # fmt: skip
