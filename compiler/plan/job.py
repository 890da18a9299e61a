"""The weight-sync Jobs as the plan has them: per sync tier, the command line of
``standbyc weights sync`` with its time budget; the weight-report CronJob's command line;
and what every such pod shares (the store's credentials, the trust material a signed sync
mounts, the ServiceAccount's and the pod's annotations).

Derived once here, beside the rest of the plan, so the renderers only write them out
(``render/weight_sync.py``, ``render/weight_report.py``).
"""

from __future__ import annotations

import math
from pathlib import PurePosixPath
from typing import Any

from compiler import engines, units
from compiler.names import Names
from compiler.plan.model import JobPlan, JobPod, StorePlan, SyncPlan, TierPlan
from compiler.spec import (
    IrsaCredentials,
    KeyVerify,
    ProfileCredentials,
    SecretCredentials,
    StandbySpec,
    Verify,
)
from compiler.weights import BUDGET_COPIES, BUDGET_SLACK

MIN_RATE_SHARE = 4  # a request's floor: the tier's weight-sync rate / 4

# In a namespace with Istio sidecar injection, an injected proxy keeps running after the
# sync and the Job never completes. Asked per pod (Istio >= 1.24 reads this annotation), the
# proxy is injected as a native sidecar (an init container with restartPolicy Always, on by
# default since Kubernetes 1.29): Kubernetes stops it once the sync container exits, and the
# Job still reaches the store through the mesh. Without Istio the annotation is inert;
# ambient mode injects nothing, so nothing is asked.
NATIVE_SIDECAR = {"sidecar.istio.io/nativeSidecar": "true"}

# weightSync.verify: the trust material (a public key, a certificate chain, or a Sigstore
# trust configuration), from the user's Secret or ConfigMap, is mounted read-only here with
# that one key, and the flags make ``standbyc weights sync`` verify each staged generation
# with it before the swap (``compiler/weights/sync/verify.py``).
VERIFY_DIR = "/etc/standbyc/verify"
VERIFY_VOLUME = "verify"

AWS_DIR = "/etc/standbyc/aws"  # where a profile's Secret is mounted
IRSA_ANNOTATION = "eks.amazonaws.com/role-arn"  # read by EKS's pod identity webhook
SECRET_KEYS = (("AWS_ACCESS_KEY_ID", False), ("AWS_SECRET_ACCESS_KEY", False),
               ("AWS_SESSION_TOKEN", True))  # fmt: skip


def downloads_budget(full_s: float) -> int:
    """Seconds a sync's downloads may take: two full copies at the tier's rate plus 5
    minutes. The Job's deadline is sized from it (``builders.job_deadline_s``), and so is
    its ``--deadline``."""
    return BUDGET_COPIES * math.ceil(full_s) + BUDGET_SLACK


def sync_budget(tier: TierPlan) -> int:
    """Seconds the weight-sync Job gives one sync's downloads and swap (--deadline): what
    its deadline leaves after the whole reload at worst and the report."""
    budget = downloads_budget(tier.sync_seconds_full)
    kept = engines.REPORT_SECONDS + (tier.reload.budget_s if tier.reload else 0)
    return max(engines.MIN_SYNC_SECONDS, min(budget, tier.job_deadline_s - kept))


def target(sync: SyncPlan, tier: str, model_path: str) -> str:
    """The checkpoint directory of one tier's standbys, on the claim: the standbys mount
    ``<tier>`` at the parent of ``model_path``."""
    return f"{sync.mount}/{tier}/{PurePosixPath(model_path).name}"


def verify_args(verify: Verify, model: str) -> list[str]:
    """The Job's --verify flags: the trust, and the model each generation must be signed as."""
    args = ["--verify", verify.type, "--verify-trust", f"{VERIFY_DIR}/{verify.trust_file.key}",
            "--verify-model", model]  # fmt: skip
    if not isinstance(verify, KeyVerify):
        args += ["--verify-identity", verify.identity]
    if verify.type == "sigstore":
        args += ["--verify-issuer", verify.issuer]
    return args


def verify_volume(verify: Verify) -> dict[str, Any]:
    f = verify.trust_file
    items = [{"key": f.key, "path": f.key}]
    if f.secret_name is not None:
        return {"name": VERIFY_VOLUME, "secret": {"secretName": f.secret_name, "items": items}}
    return {"name": VERIFY_VOLUME, "configMap": {"name": f.config_map_name, "items": items}}


def job_args(spec: StandbySpec, sync: SyncPlan, tier: TierPlan) -> tuple[str, ...]:
    model, namespace = spec.spec.model, spec.metadata.namespace
    args = [
        "weights",
        "sync",
        "--source",
        sync.store.url,
        *(["--endpoint-url", sync.store.endpoint] if sync.store.endpoint else []),
        "--generation",
        str(model.generation),
        "--target",
        target(sync, tier.name, model.path),
        "--rate-limit",
        units.k8s_quantity(tier.sync_rate_bps) + "bit/s",
        # A request may take its bytes at a quarter of the tier's rate, the whole sync
        # twice a full copy at the rate plus 5 minutes, and ends before the Job's own
        # deadline so that it still reports (docs/weight-sync.md).
        "--min-rate",
        units.k8s_quantity(tier.sync_rate_bps // MIN_RATE_SHARE) + "bit/s",
        "--deadline",
        str(sync_budget(tier)),
        *(["--allow-rollback"] if spec.spec.weight_sync.allow_rollback else []),
    ]
    if tier.reload is not None:
        args += [
            "--reload",
            tier.reload.api,
            "--engines",
            tier.reload.url(namespace),
            "--engine-model-path",
            model.path,
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
        args += verify_args(sync.verify, model.name)
    if sync.pushgateway:
        args += ["--pushgateway", sync.pushgateway]
        for key, value in {**sync.report_labels, "tier": tier.name}.items():
            args += ["--label", f"{key}={value}"]
    return (*args, "--format", "json")


def jobs(spec: StandbySpec, sync: SyncPlan, n: Names) -> tuple[JobPlan, ...]:
    return tuple(
        JobPlan(tier, n.weight_sync(tier.name), job_args(spec, sync, tier)) for tier in sync.tiers
    )


def report_args(spec: StandbySpec, sync: SyncPlan) -> tuple[str, ...]:
    """``standbyc weights report``'s: every sync tier's state pushed again ((): no
    weight-report CronJob, without a schedule or a Pushgateway)."""
    if not sync.tiers or sync.report_schedule is None or sync.pushgateway is None:
        return ()
    out = ["weights", "report", "--pushgateway", sync.pushgateway]
    for tier in sync.tiers:
        out += ["--tier", tier.name, target(sync, tier.name, spec.spec.model.path)]
        if tier.reload is not None:
            out += ["--reload", tier.name, tier.reload.api]
    for key, value in sync.report_labels.items():
        out += ["--label", f"{key}={value}"]
    return (*out, "--format", "json")


def store_env(store: StorePlan) -> tuple[list[dict[str, Any]], str | None]:
    """The env that gives an s3:// store's credentials to the Job (botocore reads it), and
    the Secret to mount at AWS_DIR for a profile. IRSA needs neither: the webhook adds the
    role and the token file to every pod of the annotated ServiceAccount."""
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


def pod(spec: StandbySpec, sync: SyncPlan) -> JobPod:
    env, secret = store_env(sync.store)
    creds = sync.store.credentials
    irsa = {IRSA_ANNOTATION: creds.role_arn} if isinstance(creds, IrsaCredentials) else {}
    sidecar = spec.spec.connection_pool.istio.mode == "sidecar"
    return JobPod(
        env=env,
        aws_secret=secret,
        verify_volume=verify_volume(sync.verify) if sync.verify is not None else None,
        account_annotations=irsa,
        annotations=dict(NATIVE_SIDECAR) if sidecar else {},
    )
