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
from compiler.render.base import Emitted, Expect, Renderer, filename, meta

INDEX = "$(JOB_COMPLETION_INDEX)"  # expanded by the kubelet from the container env


def sync_labels(plan: Plan) -> dict[str, str]:
    """Labels of weight-sync pods; the weight-source NetworkPolicy admits them."""
    return {"standbyc.dev/weight-sync": plan.name}


def job_args(plan: Plan, tier: TierPlan) -> list[str]:
    model = plan.spec.spec.model
    return [
        "weights",
        "sync",
        "--source",
        plan.source_url,
        "--model",
        model.name,
        "--generation",
        str(model.generation),
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
    ws = plan.spec.spec.weight_sync
    context = {
        "tier": tier,
        "parallelism": min(tier.replicas, ws.parallelism),
        "backoff_limit": ws.backoff_limit,
        "active_deadline_seconds": max(1, ws.active_deadline // 1000),
        "ttl_seconds": ws.ttl_after_finished // 1000,
        "pod_labels": {
            **names.common_labels(plan.spec),
            **sync_labels(plan),
            "standbyc.dev/tier": tier.name,
        },
        "service_account": names.weight_sync_account(plan.spec),
        "image": ws.image,
        "args": job_args(plan, tier),
        "resources": ws.resources,
        "claim": plan.claim,
    }
    return r.render_data("weight-sync-jobspec.yaml.j2", context)


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    ws = plan.spec.spec.weight_sync
    account = names.weight_sync_account(plan.spec)
    out = [
        Emitted(
            filename("ServiceAccount", account),
            r.render(
                "serviceaccount.yaml.j2",
                {**meta(plan, wave=-1), "name": account},
                Expect("v1", "ServiceAccount", account, plan.namespace),
            ),
        )
    ]
    for tier in plan.sync_tiers:
        name = names.weight_sync(plan.spec, tier.name)
        labels = {"standbyc.dev/tier": tier.name}
        context: dict[str, Any] = {"name": name, "job_spec": _job_spec(plan, r, tier)}
        if ws.trigger.type == "schedule":
            base = meta(plan, wave=1)
            base["labels"] = {**base["labels"], **labels}
            context.update(base, schedule=ws.trigger.schedule)
            kind, template = "CronJob", "cronjob.yaml.j2"
        else:
            hook = {
                "argocd.argoproj.io/hook": ws.trigger.hook,
                # Job names are fixed, so the previous run is deleted before the next.
                "argocd.argoproj.io/hook-delete-policy": "BeforeHookCreation",
            }
            base = meta(plan, extra=hook)
            base["labels"] = {**base["labels"], **labels}
            context.update(base)
            kind, template = "Job", "job.yaml.j2"
        obj = r.render(template, context, Expect("batch/v1", kind, name, plan.namespace))
        out.append(Emitted(filename(kind, name), obj))
    return out
