"""Weight sync: a ServiceAccount and, per tier, a Job (or a CronJob) running
``standbyc weights sync``.

The tier's standbys share one checkpoint on the ReadWriteMany claim,
``/weights/<tier>/<basename of model.path>`` (their pods mount the claim with
``subPath: <tier>`` at the parent of ``model.path``), so
one Job per tier keeps it current: it pulls the cheapest route from the store, at the
tier's egress limit times ``bandwidthShare``, so a sync never takes the bandwidth the
tier needs to serve; then it reports the generation held to the Pushgateway.
"""

from __future__ import annotations

import math
from pathlib import PurePosixPath
from typing import Any

from compiler import names, trust, units
from compiler.plan import Plan, TierPlan
from compiler.render.base import Emitted, Renderer, filename
from compiler.spec import IrsaCredentials, ProfileCredentials, SecretCredentials

MIN_RATE_SHARE = 4  # a request's floor: the tier's weight-sync rate / 4
BUDGET_COPIES = 2  # the sync's budget: two full copies at the tier's rate ...
BUDGET_SLACK = 300  # ... plus 5 minutes
REPORT_TIME = 60  # kept from the Job's activeDeadlineSeconds, besides the reload: to report


def sync_budget(plan: Plan, tier: TierPlan) -> int:
    """Seconds the weight-sync Job gives one sync's downloads and swap (--deadline)."""
    budget = BUDGET_COPIES * math.ceil(tier.sync_seconds_full) + BUDGET_SLACK
    kept = REPORT_TIME + (tier.reload.timeout_s if tier.reload is not None else 0)
    return max(60, min(budget, plan.sync.active_deadline_seconds - kept))


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
        str(sync_budget(plan, tier)),
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
        ]
        if tier.reload.api == "triton":
            args += ["--engine-model", tier.reload.model]
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
        "active_deadline_seconds": sync.active_deadline_seconds,
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
        context: dict[str, Any] = {"name": name, "job_spec": _job_spec(plan, r, tier)}
        # For reviewers of out/: how the standbys see what this Job writes.
        annotations = {
            "standbyc.dev/standbys-mount": f"claim {plan.sync.claim}, subPath {tier.name}, "
            f"at {model.parent}; they load the model directory {model}"
        }
        if trigger.type == "schedule":
            context.update(schedule=trigger.schedule, job_labels={**plan.labels, **labels})
            kind, template = "CronJob", "cronjob.yaml.j2"
        else:
            annotations |= {
                "argocd.argoproj.io/hook": trigger.hook,
                # Job names are fixed, so the previous run is deleted before the next.
                "argocd.argoproj.io/hook-delete-policy": "BeforeHookCreation",
            }
            kind, template = "Job", "job.yaml.j2"
        obj = r.render(template, context, kind)
        out.append(Emitted(filename(kind, name), obj, labels, annotations))
    return out
