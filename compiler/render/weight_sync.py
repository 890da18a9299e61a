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
Job of its tier succeeds) until pruned or deleted after ``weightSync.ttlAfterFinished``.
Its file keeps the tier's name, so a review sees the Job change, not a file renamed.
"""

from __future__ import annotations

import math
from pathlib import PurePosixPath
from typing import Any

from compiler import engines, names, trust, units
from compiler.emitted import Emitted
from compiler.plan import Plan, TierPlan
from compiler.render.base import Renderer, filename
from compiler.spec import IrsaCredentials, ProfileCredentials, SecretCredentials
from compiler.weights import BUDGET_COPIES, BUDGET_SLACK

MIN_RATE_SHARE = 4  # a request's floor: the tier's weight-sync rate / 4


def sync_budget(tier: TierPlan) -> int:
    """Seconds the weight-sync Job gives one sync's downloads and swap (--deadline): what
    its deadline leaves after the whole reload at worst and the report."""
    budget = BUDGET_COPIES * math.ceil(tier.sync_seconds_full) + BUDGET_SLACK
    kept = engines.REPORT_SECONDS + (tier.reload.budget_s if tier.reload else 0)
    return max(engines.MIN_SYNC_SECONDS, min(budget, tier.job_deadline_s - kept))


def job_args(plan: Plan, tier: TierPlan) -> list[str]:
    sync = plan.sync
    args = [
        "weights",
        "sync",
        "--source",
        sync.store.url,
        *(["--endpoint-url", sync.store.endpoint] if sync.store.endpoint else []),
        "--generation",
        str(plan.generation),
        "--target",
        sync.target(tier.name, plan.model_path),
        "--rate-limit",
        units.k8s_quantity(tier.sync_rate_bps) + "bit/s",
        # A request may take its bytes at a quarter of the tier's rate, the whole sync
        # twice a full copy at the rate plus 5 minutes, and ends before the Job's own
        # deadline so that it still reports (docs/weight-sync.md).
        "--min-rate",
        units.k8s_quantity(tier.sync_rate_bps // MIN_RATE_SHARE) + "bit/s",
        "--deadline",
        str(sync_budget(tier)),
    ]
    if tier.reload is not None:
        args += [
            "--reload",
            tier.reload.api,
            "--engines",
            tier.reload.url(plan.namespace),
            "--engine-model-path",
            plan.model_path,
            "--reload-timeout",
            str(tier.reload.timeout_s),
            # A few pods at a time, so the rest of the tier serves; the whole reload within
            # what the Job's deadline keeps for it (docs/engine-reload.md).
            "--max-unavailable",
            str(tier.reload.max_unavailable),
            "--expect-pods",
            str(tier.reload.pods),
            "--reload-deadline",
            str(tier.reload.budget_s),
        ]
        if tier.reload.api == "triton":
            args += ["--engine-model", tier.reload.model]
        if tier.reload.swap:
            args += ["--engine-swap", tier.reload.swap]
    if sync.verify is not None:  # each generation's signature, checked before the swap
        args += trust.job_args(sync.verify)
    if sync.pushgateway:
        args += ["--pushgateway", sync.pushgateway]
        for key, value in {**sync.report_labels, "tier": tier.name}.items():
            args += ["--label", f"{key}={value}"]
    return [*args, "--format", "json"]


# In a namespace with Istio sidecar injection, an injected proxy keeps running after the
# sync and the Job never completes. Asked per pod (Istio >= 1.24 reads this annotation), the
# proxy is injected as a native sidecar (an init container with restartPolicy Always, on by
# default since Kubernetes 1.29): Kubernetes stops it once the sync container exits, and the
# Job still reaches the store through the mesh. Without Istio the annotation is inert;
# ambient mode injects nothing, so nothing is asked.
NATIVE_SIDECAR = {"sidecar.istio.io/nativeSidecar": "true"}


def pod_annotations(plan: Plan) -> dict[str, str]:
    return dict(NATIVE_SIDECAR) if plan.pool.istio.mode == "sidecar" else {}


AWS_DIR = "/etc/standbyc/aws"  # where a profile's Secret is mounted
IRSA_ANNOTATION = "eks.amazonaws.com/role-arn"  # read by EKS's pod identity webhook
SECRET_KEYS = (("AWS_ACCESS_KEY_ID", False), ("AWS_SECRET_ACCESS_KEY", False),
               ("AWS_SESSION_TOKEN", True))  # fmt: skip


def store_env(plan: Plan) -> tuple[list[dict[str, Any]], str | None]:
    """The env that gives an s3:// store's credentials to the Job (botocore reads it), and
    the Secret to mount at AWS_DIR for a profile. IRSA needs neither: the webhook adds the
    role and the token file to every pod of the annotated ServiceAccount."""
    store = plan.sync.store
    env: list[dict[str, Any]] = []
    if store.region is not None:
        env.append({"name": "AWS_REGION", "value": store.region})
    creds = store.credentials
    if isinstance(creds, SecretCredentials):
        for key, optional in SECRET_KEYS:
            ref: dict[str, Any] = {"name": creds.secret_name, "key": key}
            if optional:
                ref["optional"] = True
            env.append({"name": key, "valueFrom": {"secretKeyRef": ref}})
    if isinstance(creds, ProfileCredentials):
        env += [
            {"name": "AWS_SHARED_CREDENTIALS_FILE", "value": f"{AWS_DIR}/credentials"},
            {"name": "AWS_CONFIG_FILE", "value": f"{AWS_DIR}/config"},
            {"name": "AWS_PROFILE", "value": creds.profile},
        ]
        return env, creds.secret_name
    return env, None


def account_annotations(plan: Plan) -> dict[str, str]:
    creds = plan.sync.store.credentials
    return {IRSA_ANNOTATION: creds.role_arn} if isinstance(creds, IrsaCredentials) else {}


def _job_spec(plan: Plan, r: Renderer, tier: TierPlan) -> Any:
    sync = plan.sync
    env, secret = store_env(plan)
    context = {
        "env": env,
        "aws_secret": secret,
        "aws_dir": AWS_DIR,
        "backoff_limit": sync.backoff_limit,
        "active_deadline_seconds": tier.job_deadline_s,
        # A stopped Job (its deadline, its pod deleted) finishes the step in flight and
        # resumes what it paused before it exits.
        "grace_seconds": tier.reload.grace_s if tier.reload else None,
        "ttl_seconds": sync.ttl_seconds,
        "pod_labels": {**plan.labels, **sync.pod_labels, names.TIER_LABEL: tier.name},
        "pod_annotations": pod_annotations(plan),
        "container": "weight-sync",
        "service_account": plan.names.weight_sync_account,
        "image": sync.image,
        "args": job_args(plan, tier),
        "resources": sync.resources,
        "mount": sync.mount,
        "claim": sync.claim,
    }
    if sync.verify is not None:
        context |= {"verify_volume": trust.volume(sync.verify), "verify_dir": trust.VERIFY_DIR,
                    "fail_on_exit": trust.REFUSED_EXIT}  # fmt: skip
    return r.render_data("weight-sync-jobspec.yaml.j2", context)


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
                **account_annotations(plan),
                names.GENERATION_ANNOTATION: str(plan.generation),
            },
        )
    ]
    trigger = plan.sync.trigger
    model = PurePosixPath(plan.model_path)
    for tier in plan.sync.tiers:
        name = plan.names.weight_sync(tier.name)
        labels = {names.TIER_LABEL: tier.name}
        job_spec = _job_spec(plan, r, tier)
        context: dict[str, Any] = {"name": name, "job_spec": job_spec}
        # For reviewers of out/: how the standbys see what this Job writes.
        annotations = {
            "standbyc.dev/standbys-mount": f"claim {plan.sync.claim}, subPath {tier.name}, "
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
