"""Weight sync: a ServiceAccount and, per tier, a Job (or a CronJob) running
``standbyc weights sync``.

The tier's standbys share one checkpoint on the ReadWriteMany claim,
``/weights/<tier>/<basename of model.path>`` (their pods mount the claim with
``subPath: <tier>`` at the parent of ``model.path``), so
one Job per tier keeps it current: it pulls the cheapest route from the store, at the
tier's egress limit times ``bandwidthShare``, so a sync never takes the bandwidth the
tier needs to serve; then it reports the generation held to the Pushgateway.

A Job's ``spec.template`` cannot change once created: ``kubectl apply`` (client or server
side) refuses a recompiled Job of the same name, and would leave the cluster half updated,
its rules wanting a generation that no Job brings. So a weight-sync Job is named after
its spec (``<name>-weight-sync-<tier>-<digest>``): any change (a new generation, image or
rate) is a new Job, which runs, applied by Argo CD, Flux or ``kubectl apply`` alike. The
previous Job is kept as the record of its run (WeightSyncJobFailed reads it until a later
Job of its tier succeeds) until ``weightSync.ttlAfterFinished`` (7 days by default) after
it finished, when Kubernetes deletes it, or until pruned.
Its file keeps the tier's name, so a review sees the Job change, not a file renamed.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from compiler import names
from compiler.emitted import Emitted
from compiler.plan import JobPlan, Plan
from compiler.plan.job import AWS_DIR, VERIFY_DIR
from compiler.plan.model import REFUSED_EXIT
from compiler.render.base import Renderer, filename


def _job_spec(plan: Plan, r: Renderer, job: JobPlan) -> Any:
    sync, pod, tier = plan.sync, plan.sync.pod, job.tier
    context = {
        "env": pod.env,
        "aws_secret": pod.aws_secret,
        "aws_dir": AWS_DIR,
        "backoff_limit": sync.backoff_limit,
        "active_deadline_seconds": tier.job_deadline_s,
        # A stopped Job (its deadline, its pod deleted) finishes the step in flight and
        # resumes what it paused before it exits.
        "grace_seconds": tier.reload.grace_s if tier.reload else None,
        "ttl_seconds": sync.ttl_seconds,
        "pod_labels": {**plan.labels, **sync.pod_labels, names.TIER_LABEL: tier.name},
        "pod_annotations": pod.annotations,
        "container": "weight-sync",
        "service_account": plan.names.weight_sync_account,
        "image": sync.image,
        "args": list(job.args),
        "resources": sync.resources,
        "mount": sync.mount,
        "claim": sync.claim,
    }
    if pod.verify_volume is not None:
        context |= {"verify_volume": pod.verify_volume, "verify_dir": VERIFY_DIR,
                    "fail_on_exit": REFUSED_EXIT,
                    "empty_pod_conditions": _conditions_required(plan, r)}  # fmt: skip
    return r.render_data("weight-sync-jobspec.yaml.j2", context)


# Kubernetes 1.28's PodFailurePolicyRule requires onPodConditions (without omitempty), even
# beside onExitCodes; from 1.29 it is optional, and an empty list is dropped on write. The
# rule carries ``onPodConditions: []`` only for objects meant for a minor before that.
CONDITIONS_OPTIONAL_MINOR = 29


def _conditions_required(plan: Plan, r: Renderer) -> bool:
    versions = r.kube_versions or plan.kube_versions
    return any(int(v.split(".")[1]) < CONDITIONS_OPTIONAL_MINOR for v in versions)


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    if not plan.sync.tiers:
        return []
    account = plan.names.weight_sync_account
    # The generation, on an object Argo CD compares: bumping model.generation must leave
    # the app OutOfSync, or automated sync never runs the PostSync hooks (Argo CD leaves
    # hooks out of the sync status), whatever else the spec emits.
    out = [
        Emitted(
            filename("ServiceAccount", account),
            r.render("serviceaccount.yaml.j2", {"name": account}, "ServiceAccount"),
            annotations={
                **plan.sync.pod.account_annotations,
                names.GENERATION_ANNOTATION: str(plan.generation),
            },
        )
    ]
    trigger = plan.sync.trigger
    model = PurePosixPath(plan.model_path)
    for job in plan.sync.jobs:
        name = job.name
        labels = {names.TIER_LABEL: job.tier.name}
        job_spec = _job_spec(plan, r, job)
        context: dict[str, Any] = {"name": name, "job_spec": job_spec}
        # For reviewers of out/: how the standbys see what this Job writes.
        annotations = {
            "standbyc.dev/standbys-mount": f"claim {plan.sync.claim}, subPath {job.tier.name}, "
            f"at {model.parent}; they load the model directory {model}"
        }
        if trigger.type == "schedule":
            context.update(schedule=trigger.schedule, job_labels={**plan.labels, **labels})
            kind, template = "CronJob", "cronjob.yaml.j2"
        else:
            # Named after its spec (see the module doc); a CronJob's template may change.
            context["name"] = f"{name}-{names.spec_digest(job_spec)}"
            annotations |= {
                "argocd.argoproj.io/hook": trigger.hook,
                # A sync at the same spec runs the Job again: Argo CD deletes it first.
                "argocd.argoproj.io/hook-delete-policy": "BeforeHookCreation",
            }
            kind, template = "Job", "job.yaml.j2"
        obj = r.render(template, context, kind)
        out.append(Emitted(filename(kind, name), obj, labels, annotations))
    return out
