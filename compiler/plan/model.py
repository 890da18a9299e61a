"""The plan's data types: what the renderers read, and what is derived from it alone.

The plan is the renderers' only input: names, selectors, rates and the settings of each
section are looked up once (``compiler.plan.builders``), never re-derived from the spec.
Besides the values, the plan says what the compile summary shows (``Plan.summary``) and
what the emitted objects need from the user (``Plan.requirements``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import PurePosixPath
from typing import Any

from compiler import engines, names, units
from compiler.failover import FailoverPlan, Inputs
from compiler.names import Names
from compiler.spec import (
    Alerts,
    ArgoHookTrigger,
    ConnectionPool,
    DashboardSettings,
    EnginePorts,
    Resources,
    ScheduleTrigger,
    StoreCredentials,
    TrustFile,
    Verify,
)


@dataclass(frozen=True)
class ReloadPlan:
    """How the weight-sync Job asks a tier's running engines to load a new generation."""

    api: str  # sglang | vllm | triton
    port: int
    timeout_s: int
    model: str  # triton: the model's name in its repository
    service: str  # the headless Service whose name resolves to every ready pod of the tier
    swap: str  # triton: "" (side by side) or engines.UNLOAD_FIRST
    max_unavailable: int  # pods asked to load at once
    pods: int  # the tier's replicas

    def url(self, namespace: str) -> str:
        return f"http://{self.service}.{namespace}.svc:{self.port}"

    @property
    def waves(self) -> int:
        return engines.waves(self.pods, self.max_unavailable)

    @property
    def budget_s(self) -> int:
        """The whole reload at worst: what the Job's deadline keeps for it."""
        return math.ceil(engines.tier_seconds(
            self.api, self.timeout_s, self.pods, self.max_unavailable, self.swap))  # fmt: skip

    @property
    def grace_s(self) -> int:
        """What a stopped Job needs to finish the step it is in and resume what it paused."""
        return math.ceil(engines.grace_seconds(self.api, self.timeout_s, self.swap))


@dataclass(frozen=True)
class TierPlan:
    name: str
    replicas: int
    egress_bps: int
    egress_quantity: str  # what Cilium reads: a quantity in bit/s, e.g. "25G"
    priority: str  # Cilium Network QoS class, or an integer as a string
    selector: dict[str, str]  # engine selector plus the tier label
    sync_rate_bps: int  # weight-sync rate limit of the tier's Job
    sync_seconds_full: float  # one full copy at the sync rate
    sync_seconds_delta: float
    reload: ReloadPlan | None  # None: the engines load a new generation when they restart
    job_deadline_s: int  # the tier's weight-sync Job's activeDeadlineSeconds


@dataclass(frozen=True)
class EnginePlan:
    selector: dict[str, str]  # labels every engine pod carries
    tier_label: str  # the pod label whose value is the tier
    protocol: str
    ports: EnginePorts

    @property
    def ksm_selector(self) -> dict[str, str]:
        """The selector as kube-state-metrics' kube_pod_labels labels."""
        return {names.ksm_label(k): v for k, v in self.selector.items()}

    @property
    def ksm_tier(self) -> str:
        """The tier label as kube-state-metrics names it."""
        return names.ksm_label(self.tier_label)

    @property
    def label_keys(self) -> list[str]:
        """The pod label keys the alerts select on, in the spec's order."""
        return list(dict.fromkeys([*self.selector, self.tier_label]))

    @property
    def allowlist_flag(self) -> str:
        """The kube-state-metrics flag that exports the pod labels the alerts select on."""
        return allowlist_flag(self.label_keys)


# Every namespace carries this label (Kubernetes sets it); exported on kube_namespace_labels,
# it shows that kube-state-metrics runs with standbyc's allowlist, whatever pods run.
NAMESPACE_SENTINEL = "kubernetes.io/metadata.name"


def allowlist_flag(keys: list[str]) -> str:
    """kube-state-metrics' flag exporting these pod label keys on kube_pod_labels, and the
    namespace label that tells the alerts the flag is in force."""
    return f"--metric-labels-allowlist=pods=[{','.join(keys)}],namespaces=[{NAMESPACE_SENTINEL}]"


@dataclass(frozen=True)
class StorePlan:
    """Where the published store is served from; ``claim`` is set for the in-cluster one."""

    url: str
    claim: str | None  # None: an external store, nothing to emit
    image: str
    port: int
    name: str  # the in-cluster store's Deployment and Service
    pod_labels: dict[str, str]
    endpoint: str | None = None  # s3://: an S3-compatible server
    region: str | None = None  # s3://: the bucket's region
    credentials: StoreCredentials | None = None  # s3://: how the Job gets them


@dataclass(frozen=True)
class JobPlan:
    """One sync tier's weight-sync Job (``compiler.plan.job``)."""

    tier: TierPlan
    name: str  # a CronJob's; a Job's, before the digest of its spec (render/weight_sync.py)
    args: tuple[str, ...]  # of ``standbyc weights sync``


@dataclass(frozen=True)
class JobPod:
    """What every weight-sync Job's pod shares (``compiler.plan.job``)."""

    env: list[dict[str, Any]] = field(default_factory=list)  # the store's credentials
    aws_secret: str | None = None  # a profile's Secret, mounted at plan.job.AWS_DIR
    verify_volume: dict[str, Any] | None = None  # the trust material of a signed sync
    account_annotations: dict[str, str] = field(default_factory=dict)  # the ServiceAccount's
    annotations: dict[str, str] = field(default_factory=dict)  # the pod's


@dataclass(frozen=True)
class SyncPlan:
    """Weight sync: who pulls what, from where, into which claim, at which rate."""

    tiers: tuple[TierPlan, ...]
    image: str
    trigger: ArgoHookTrigger | ScheduleTrigger
    backoff_limit: int
    ttl_seconds: int | None
    resources: Resources
    store: StorePlan
    claim: str  # ReadWriteMany: <tier>/<model name> per tier
    mount: str  # where the Jobs mount the claim
    pod_labels: dict[str, str]  # labels of weight-sync pods (besides the tier's)
    expected_delta: Fraction
    pushgateway: str | None
    report_labels: dict[str, str]  # the pushed series' labels besides job and tier
    report_schedule: str | None  # the weight-report CronJob's; None: none emitted
    # How long the weight alerts keep a pushed value after the Pushgateway forgot it (a
    # restart without persistence): the longest wait for the weight-report CronJob, and
    # builders.REPORT_MARGIN_MS for its Job to start and push and Prometheus to scrape.
    report_bridge_ms: int
    verify: Verify | None = None  # what each generation must be signed with
    jobs: tuple[JobPlan, ...] = ()  # one per sync tier, in its order
    report_args: tuple[str, ...] = ()  # of ``standbyc weights report``; (): no CronJob
    pod: JobPod = field(default_factory=JobPod)

    @property
    def scheduled(self) -> bool:
        return self.trigger.type == "schedule"


@dataclass(frozen=True)
class Plan:
    name: str
    namespace: str
    source: str  # spec file as shown to the user
    labels: dict[str, str]  # on every emitted object
    annotations: dict[str, str]  # on every emitted object
    names: Names
    engine: EnginePlan
    tiers: tuple[TierPlan, ...]  # tiers with at least one replica, hot first
    qos_outputs: frozenset[str]
    pool: ConnectionPool
    expected_connections: int
    read_timeout_ms: int  # connections.readTimeout: ingress-nginx's proxy-read-timeout
    model_name: str
    model_path: str  # where the engine reads the checkpoint
    model_size: int
    generation: int
    sync: SyncPlan
    alerts: Alerts
    dashboard: DashboardSettings
    kube_versions: tuple[str, ...]  # validation.kubernetesVersions ((): the default matrix)
    # Derived numbers, for the summary.
    link_bps: int
    standby_replicas: int  # replicas that weight sync feeds
    full_copy_bytes: int
    full_copy_seconds: float  # all standbys, at link rate, before protocol overhead
    delta_bytes: int
    delta_seconds: float
    health_probers: int
    health_interval_ms: int
    health_probes_per_second: Fraction
    health_bytes_per_second: Fraction
    failover: FailoverPlan
    failover_inputs: Inputs
    failover_strict: bool

    @property
    def generation_file(self) -> str:
        """Where the engine pods read the generation their model directory holds."""
        model = PurePosixPath(self.model_path)
        return str(model.parent / names.SYNC_STATE_DIR / model.name / names.GENERATION_FILE)

    def summary(self) -> dict[str, Any]:
        """Derived numbers with their formulas, for the compile summary."""
        targets = sum(t.replicas for t in self.tiers)
        return {
            "fullCopy": {
                "formula": f"{units.human_bytes(self.model_size)} x {self.standby_replicas} "
                f"standbys / {units.human_bits(self.link_bps)}",
                "bytes": self.full_copy_bytes,
                "gigabits": round(self.full_copy_bytes * 8 / 1e9, 2),
                "seconds": round(self.full_copy_seconds, 6),
            },
            "delta": {
                "formula": f"{units.human_bytes(self.model_size)} x expected delta "
                f"{float(self.sync.expected_delta):.1%} x {len(self.sync.tiers)} sync tier(s), "
                "one delta a tier",
                "bytes": self.delta_bytes,
                "seconds": round(self.delta_seconds, 6),
            },
            "healthChecks": {
                "formula": f"{_plural(self.health_probers, 'prober')} x "
                f"{_plural(targets, 'target')} / {units.prom_duration(self.health_interval_ms)}",
                "probesPerSecond": float(self.health_probes_per_second),
                "bytesPerSecond": float(self.health_bytes_per_second),
            },
            "tiers": {
                t.name: {
                    "replicas": t.replicas,
                    "egress": t.egress_quantity,
                    "priority": t.priority,
                    "syncRateBitsPerSecond": t.sync_rate_bps,
                }
                for t in self.tiers
            },
            "requires": self.requirements(),
        }

    def _store_credentials(self, creds: StoreCredentials) -> str:
        account = f"{self.namespace}/{self.names.weight_sync_account}"
        if creds.type == "irsa":
            return (
                f"IAM role {creds.role_arn}, allowed s3:GetObject on the store, whose trust "
                "policy lets the cluster's OIDC provider assume it for system:serviceaccount:"
                f"{account.replace('/', ':')} (audience sts.amazonaws.com); the weight-sync "
                f"ServiceAccount {account} carries it (eks.amazonaws.com/role-arn)"
            )
        if creds.type == "secret":
            return (
                f"Secret {self.namespace}/{creds.secret_name} with AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (AWS_SESSION_TOKEN optional): keys that may read the store"
            )
        return (
            f"Secret {self.namespace}/{creds.secret_name} with an AWS shared credentials file "
            f"under the key credentials (config optional) holding profile {creds.profile}"
        )

    def reload_ingress_rule(self, ports: list[int]) -> str:
        """The rule as one line of JSON (valid YAML), for the requires list and PLAN.md."""
        return json.dumps(reload_ingress_rule(self.sync.pod_labels, ports), sort_keys=True)

    def requirements(self) -> list[str]:
        """What the emitted objects reference and the user must provide."""
        rule_labels = ", ".join(f"{k}={v}" for k, v in self.alerts.rule_labels.items())
        out = [
            f"kube-state-metrics run with {self.engine.allowlist_flag} (by default it "
            "exports no pod label: the bandwidth alerts see no pod, and "
            "StandbyTierLabelsMissing fires)",
            f"a Prometheus whose ruleSelector matches {rule_labels} (spec.alerts.ruleLabels)"
            if rule_labels
            else "a Prometheus with an empty ruleSelector (the PrometheusRule has no labels)",
        ]
        sync = self.sync
        if not sync.tiers:
            return out
        model = PurePosixPath(self.model_path)
        out.append(
            f"PersistentVolumeClaim {self.namespace}/{sync.claim}, ReadWriteMany, at least "
            f"{units.human_bytes(3 * self.model_size * len(sync.tiers))} (3 x the model per "
            "sync tier: the model directory, a download, the next one staged)"
        )
        for tier in sync.tiers:
            how = (
                "they load a new generation when they restart"
                if tier.reload is None
                else f"the weight-sync Job asks its ready pods ({tier.reload.api}, port "
                f"{tier.reload.port}), {tier.reload.max_unavailable} at a time, to load it, "
                f"through the headless Service {tier.reload.service}"
            )
            out.append(
                f"tier {tier.name}: its engine pods mount {sync.claim} with subPath "
                f"{tier.name} at {model.parent} and load the model directory {model} (every "
                f"file as published: weights, config.json, tokenizer); {how}"
            )
        reloading = [t for t in sync.tiers if t.reload is not None]
        for api in sorted({t.reload.api for t in reloading if t.reload is not None}):
            tiers = ", ".join(t.name for t in reloading if t.reload and t.reload.api == api)
            needs = engines.server_needs(api, self.model_path, self.generation_file)
            out.append(f"tier {tiers}: the engine pods run {needs}")
        if reloading:
            ports = sorted({t.reload.port for t in reloading if t.reload is not None})
            out.append(
                "if a NetworkPolicy of yours selects the engine pods, add to it this ingress "
                f"rule for the weight-sync Jobs: {self.reload_ingress_rule(ports)}"
            )
        if sync.store.claim is not None:
            out.append(
                f"PersistentVolumeClaim {self.namespace}/{sync.store.claim}, ReadWriteMany: "
                "the store `standbyc weights publish` writes and the store server reads"
            )
        else:
            out.append(f"a store served at {sync.store.url} (standbyc weights publish output)")
        if sync.store.credentials is not None:
            out.append(self._store_credentials(sync.store.credentials))
        out += (
            [verify_requirement(self.namespace, sync.verify, self.model_name)]
            if sync.verify
            else []
        )
        if sync.pushgateway:
            out.append(
                f"a Pushgateway at {sync.pushgateway}, scraped by Prometheus with "
                "honor_labels: true"
            )
        out.append(f"the image {sync.image} (standbyc; see Dockerfile)")
        return out


def derived_lines(summary: dict[str, Any]) -> list[str]:
    """The derived numbers of ``Plan.summary()`` with their formulas, one line each: what
    compile prints under each spec and PLAN.md lists last."""
    fc, dl, hc = summary["fullCopy"], summary["delta"], summary["healthChecks"]
    lines = [
        f"full copy: {fc['formula']} = {fc['gigabits']} Gbit -> "
        f"{units.human_seconds(fc['seconds'])} at line rate",
        f"delta: {dl['formula']} = {units.human_bytes(dl['bytes'])} -> "
        f"{units.human_seconds(dl['seconds'])} at line rate",
        f"health checks: {hc['formula']} = {hc['probesPerSecond']:g} probes/s, "
        f"{units.human_bytes(hc['bytesPerSecond'])}/s",
    ]
    return lines + [
        f"tier {name}: {t['replicas']} x egress {t['egress']}bit/s, priority {t['priority']}, "
        f"weight sync {units.human_bits(t['syncRateBitsPerSecond'])}"
        for name, t in summary["tiers"].items()
    ]


def reload_ingress_rule(labels: dict[str, str], ports: list[int]) -> dict[str, Any]:
    """The ingress rule that admits this spec's weight-sync pods to the engines' API."""
    return {
        "from": [{"podSelector": {"matchLabels": dict(labels)}}],
        "ports": [{"protocol": "TCP", "port": p} for p in ports],
    }


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


# weightSync.verify: weights sync's exit code for a refused signature. The Job fails at once
# on it, since a retry would fetch and refuse the same generation again. The command defines
# it (EXIT_REFUSED, compiler/commands/weights/exits.py, above this layer); a test holds the
# two equal.
REFUSED_EXIT = 8


def _source(namespace: str, f: TrustFile) -> str:
    if f.secret_name is not None:
        return f"Secret {namespace}/{f.secret_name}"
    return f"ConfigMap {namespace}/{f.config_map_name}"


def verify_requirement(namespace: str, verify: Verify, model: str) -> str:
    """The requires line: what the user provides, and what the publisher must do."""
    f = verify.trust_file
    what = {
        "key": "the PEM public key of the publisher's signing key",
        "certificate": "the PEM certificate chain (your root, and intermediates) that the "
        f"signing certificate, issued to {getattr(verify, 'identity', '')}, chains to",
        "sigstore": "a Sigstore trust configuration (ClientTrustConfig JSON) for "
        f"{getattr(verify, 'identity', '')} from {getattr(verify, 'issuer', '')}",
    }[verify.type]
    return (
        f"{_source(namespace, f)} with the key {f.key}: {what}; every generation signed as "
        f"one of {model} (standbyc weights publish --sign-key KEY --model {model}, or "
        "model.sig and a standbyc-generation.json naming the generation and the model, "
        f"written by your pipeline), or the Jobs refuse it (exit {REFUSED_EXIT}, "
        "StandbyWeightsRefused)"
    )
