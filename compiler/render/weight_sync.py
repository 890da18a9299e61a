"""Weight sync: a ServiceAccount and, per tier, an Indexed Job (or CronJob).

Index i of tier T updates standby replica i of T (its weights live under
``/weights/<T>-<i>`` on the claim) by pulling only the delta from the weight
source. Its rate limit is the tier's egress limit times ``bandwidthShare``,
so a sync never takes the bandwidth the tier needs to serve.
"""

from __future__ import annotations

from typing import Any

from compiler import names, units
from compiler.plan import Plan, TierPlan
from compiler.render.base import Emitted, Renderer, filename

INDEX = "$(JOB_COMPLETION_INDEX)"  # expanded by the kubelet from the container env


def job_args(plan: Plan, tier: TierPlan) -> list[str]:
    return [
        "weights",
        "sync",
        "--source",
        plan.sync.source_url,
        "--model",
        plan.model_name,
        "--generation",
        str(plan.generation),
        "--tier",
        tier.name,
        "--index",
        INDEX,
        "--target",
        f"/weights/{tier.name}-{INDEX}",
        "--rate-limit",
        units.k8s_quantity(tier.sync_rate_bps) + "bit/s",
        "--format",
        "json",
    ]


def _job_spec(plan: Plan, r: Renderer, tier: TierPlan) -> Any:
    sync = plan.sync
    context = {
        "tier": tier,
        "parallelism": min(tier.replicas, sync.parallelism),
        "backoff_limit": sync.backoff_limit,
        "active_deadline_seconds": sync.active_deadline_seconds,
        "ttl_seconds": sync.ttl_seconds,
        "pod_labels": {**plan.labels, **sync.pod_labels, names.TIER_LABEL: tier.name},
        "service_account": plan.names.weight_sync_account,
        "image": sync.image,
        "args": job_args(plan, tier),
        "resources": sync.resources,
        "claim": plan.names.weights_claim,
    }
    return r.render_data("weight-sync-jobspec.yaml.j2", context)


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    account = plan.names.weight_sync_account
    out = [
        Emitted(
            filename("ServiceAccount", account),
            r.render("serviceaccount.yaml.j2", {"name": account}, "ServiceAccount"),
        )
    ]
    trigger = plan.sync.trigger
    for tier in plan.sync.tiers:
        name = plan.names.weight_sync(tier.name)
        labels = {names.TIER_LABEL: tier.name}
        context: dict[str, Any] = {"name": name, "job_spec": _job_spec(plan, r, tier)}
        annotations: dict[str, str] = {}
        if trigger.type == "schedule":
            context.update(schedule=trigger.schedule, job_labels={**plan.labels, **labels})
            kind, template = "CronJob", "cronjob.yaml.j2"
        else:
            annotations = {
                "argocd.argoproj.io/hook": trigger.hook,
                # Job names are fixed, so the previous run is deleted before the next.
                "argocd.argoproj.io/hook-delete-policy": "BeforeHookCreation",
            }
            kind, template = "Job", "job.yaml.j2"
        obj = r.render(template, context, kind)
        out.append(Emitted(filename(kind, name), obj, labels, annotations))
    return out
