"""Building the plan from an admitted spec: every derived number once, with its unit.

``build`` names the objects once and reads the spec section by section: the engine,
each tier (its rate, its engines' reload, its Job's deadline), the weight sync that feeds
the standby tiers, and the failover those numbers give. The data types it fills are in
``compiler.plan.model``.
"""

from __future__ import annotations

import math
from dataclasses import replace
from fractions import Fraction

from compiler import engines, names, units
from compiler.failover import analyse, rollout
from compiler.names import Names
from compiler.plan import failover_inputs, job
from compiler.plan.model import EnginePlan, Plan, ReloadPlan, StorePlan, SyncPlan, TierPlan
from compiler.spec import DEFAULT_PRIORITY, StandbySpec, cron_longest_gap

STORE_PORT = 8080  # the store server's port (nginx-unprivileged listens there)

REPORT_MARGIN_MS = 5 * 60_000
# Without a schedule standbyc can read (or without the CronJob): a Pushgateway rollout.
DEFAULT_BRIDGE_MS = 15 * 60_000


def report_bridge_ms(schedule: str | None) -> int:
    gap = None if schedule is None else cron_longest_gap(schedule)
    return DEFAULT_BRIDGE_MS if gap is None else gap * 60_000 + REPORT_MARGIN_MS


def job_deadline_s(spec: StandbySpec, reload: ReloadPlan | None, full_s: float) -> int:
    """A tier's weight-sync Job deadline: the spec's, or 30 minutes, or more when the tier's
    downloads at their budget (two full copies plus 5 minutes), twice the rebuild and
    signature check the plan expects (they grow with the model, whatever the delta), its
    whole reload at worst and its report need more. admit.py refuses a spec's deadline too
    short for the reload; PLAN.md says when one is shorter than the rollout it plans."""
    s = spec.spec
    written = s.weight_sync.active_deadline
    if written is not None:
        return max(1, written // 1000)
    rebuild = rollout.job_rebuild_seconds(
        s.model.size, s.weight_sync.claim_read_rate / 8, s.weight_sync.verify is not None
    )
    needed = job.downloads_budget(full_s) + 2 * math.ceil(rebuild) + engines.REPORT_SECONDS
    return max(engines.DEFAULT_JOB_SECONDS, needed + (reload.budget_s if reload else 0))


def _reload(spec: StandbySpec, name: str, n: Names) -> ReloadPlan | None:
    s = spec.spec
    cfg = s.tiers.get(name).reload or s.engine.reload
    if cfg.api == "restart":
        return None
    replicas = s.tiers.get(name).replicas
    return ReloadPlan(
        api=cfg.api,
        port=cfg.port or s.engine.ports.serving,
        timeout_s=max(1, cfg.timeout // 1000),
        model=cfg.model or s.model.name,
        service=n.engines(name),
        swap=engines.UNLOAD_FIRST if cfg.swap == "unloadFirst" else "",
        max_unavailable=engines.max_unavailable(cfg.max_unavailable, replicas),
        pods=replicas,
    )


def _tier_plan(spec: StandbySpec, name: str, n: Names) -> TierPlan:
    s = spec.spec
    tier = s.tiers.get(name)
    ws = s.weight_sync
    rate = int(tier.egress_bps * ws.bandwidth_share)
    # One download per tier: its standbys share one checkpoint on the claim.
    full = s.model.size * 8 / rate if tier.replicas else 0.0
    priority = tier.priority if tier.priority is not None else DEFAULT_PRIORITY[name]
    reload = _reload(spec, name, n)
    return TierPlan(
        name=name,
        replicas=tier.replicas,
        egress_bps=tier.egress_bps,
        egress_quantity=units.k8s_quantity(tier.egress_bps),
        priority=str(priority),
        selector={**s.engine.selector, s.engine.tier_label: name},
        sync_rate_bps=rate,
        sync_seconds_full=full,
        sync_seconds_delta=full * float(ws.expected_delta),
        reload=reload,
        job_deadline_s=job_deadline_s(spec, reload, full),
    )


def _engine(spec: StandbySpec) -> EnginePlan:
    e = spec.spec.engine
    return EnginePlan(
        selector=dict(e.selector),
        tier_label=e.tier_label,
        protocol=e.protocol,
        ports=e.ports,
    )


def _store(spec: StandbySpec, n: Names) -> StorePlan:
    st = spec.spec.weight_sync.store
    name, namespace = spec.metadata.name, spec.metadata.namespace
    server = n.weight_store
    return StorePlan(
        url=st.url or f"http://{server}.{namespace}.svc:{STORE_PORT}/",
        claim=None if st.url else (st.claim_name or server),
        image=st.image,
        port=STORE_PORT,
        name=server,
        pod_labels={names.STORE_LABEL: name},
        endpoint=st.endpoint,
        region=st.region,
        credentials=st.credentials,
    )


def _sync(spec: StandbySpec, tiers: tuple[TierPlan, ...], n: Names) -> SyncPlan:
    s = spec.spec
    ws = s.weight_sync
    sync = SyncPlan(
        tiers=tuple(t for t in tiers if t.name in ws.tiers),
        image=ws.image,
        trigger=ws.trigger,
        backoff_limit=ws.backoff_limit,
        ttl_seconds=None if ws.ttl_after_finished is None else ws.ttl_after_finished // 1000,
        resources=ws.resources,
        store=_store(spec, n),
        claim=n.weights_claim,
        mount="/weights",
        pod_labels={names.SYNC_LABEL: spec.metadata.name},
        expected_delta=ws.expected_delta,
        pushgateway=ws.report.pushgateway,
        report_labels={"namespace": spec.metadata.namespace, "standbyc_spec": spec.metadata.name},
        report_schedule=ws.report.schedule if ws.report.pushgateway else None,
        report_bridge_ms=report_bridge_ms(ws.report.schedule),
        verify=ws.verify,
    )
    return replace(
        sync, jobs=job.jobs(spec, sync, n), report_args=job.report_args(spec, sync),
        pod=job.pod(spec, sync),
    )  # fmt: skip


def _labels(spec: StandbySpec) -> dict[str, str]:
    """The labels on every emitted object."""
    return {
        "app.kubernetes.io/managed-by": names.MANAGED_BY,
        "app.kubernetes.io/part-of": spec.metadata.name,
        **spec.metadata.labels,
    }


def build(spec: StandbySpec, source: str) -> Plan:
    s = spec.spec
    object_names = names.of(spec)
    engine = _engine(spec)
    all_tiers = tuple(
        _tier_plan(spec, name, object_names) for name, t in s.tiers.items() if t.replicas
    )
    sync = _sync(spec, all_tiers, object_names)
    standbys = sum(t.replicas for t in sync.tiers)
    full_bytes = s.model.size * standbys
    # One delta per sync tier: the tier's standbys share one model directory on the claim.
    delta_bytes = int(s.model.size * s.weight_sync.expected_delta) * len(sync.tiers)
    hc = s.health_checks
    # Every prober asks every engine pod once an interval.
    probes = Fraction(hc.probers * sum(t.replicas for t in all_tiers) * 1000, hc.interval)
    inputs = failover_inputs.inputs(spec, all_tiers, sync)
    return Plan(
        name=spec.metadata.name,
        namespace=spec.metadata.namespace,
        source=source,
        labels=_labels(spec),
        annotations=dict(s.common_annotations),
        names=object_names,
        engine=engine,
        tiers=all_tiers,
        qos_outputs=frozenset(s.qos.outputs),
        pool=s.connection_pool,
        expected_connections=s.connections.expected,
        read_timeout_ms=s.connections.read_timeout,
        model_name=s.model.name,
        model_path=s.model.path,
        model_size=s.model.size,
        generation=s.model.generation,
        sync=sync,
        alerts=s.alerts,
        dashboard=s.dashboard,
        kube_versions=tuple(s.validation.kubernetes_versions or ()),
        link_bps=s.network.link,
        standby_replicas=standbys,
        full_copy_bytes=full_bytes,
        full_copy_seconds=full_bytes * 8 / s.network.link,
        delta_bytes=delta_bytes,
        delta_seconds=delta_bytes * 8 / s.network.link,
        health_probers=hc.probers,
        health_interval_ms=hc.interval,
        health_probes_per_second=probes,
        health_bytes_per_second=probes * hc.payload,
        failover=analyse(inputs),
        failover_inputs=inputs,
        failover_strict=s.failover.strict,
    )
