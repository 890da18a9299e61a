"""Names of the objects a spec produces, and of the labels they carry, derived in one place."""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the weight-sync image imports this module without pydantic
    from compiler.spec import StandbySpec

MANAGED_BY = "standbyc"
SYNC_LABEL = "standbyc.dev/weight-sync"  # on weight-sync pods, with the spec's name
REPORT_LABEL = "standbyc.dev/weight-report"  # on weight-report pods, with the spec's name
TIER_LABEL = "standbyc.dev/tier"  # on weight-sync Jobs and pods, with the tier
STORE_LABEL = "standbyc.dev/weight-store"  # on the in-cluster store's pods, with the spec's name
GENERATION_ANNOTATION = "standbyc.dev/model-generation"  # on an object Argo CD compares
# What weight-sync Jobs push to the Pushgateway, and what the alerts select.
WEIGHTS_METRIC = "standbyc_weights_generation"
# For a tier whose engines reload: the generation they confirmed, and the pods that did not.
# The weight-sync Job's own files beside each model directory on the claim: its state,
# and the generation the directory holds, which engines read at start (SGLang's
# --weight-version); compile names the second in what the engine pods need.
SYNC_STATE_DIR = ".standbyc"
GENERATION_FILE = "generation"
SERVED_METRIC = "standbyc_weights_served_generation"
RELOAD_FAILED_METRIC = "standbyc_weights_reload_failed_pods"
# What the tier's last update fetched and took, and how long its engines took to load it.
SYNC_BYTES_METRIC = "standbyc_weights_sync_bytes"
SYNC_SECONDS_METRIC = "standbyc_weights_sync_duration_seconds"
RELOAD_SECONDS_METRIC = "standbyc_weights_reload_duration_seconds"
# With weightSync.verify: the generation the tier's last sync refused (0: none).
REFUSED_METRIC = "standbyc_weights_refused_generation"
# What the spec wants them to hold (spec.model.generation), recorded in the rule group.
WEIGHTS_WANTED = "standbyc:weights_generation:wanted"
SYNC_JOB = "standbyc-weight-sync"
# The namespace generated tests (promtool, kyverno) put objects in that must never match.
TEST_OTHER_NAMESPACE = "standbyc-test-other"
# Hex digits of a weight-sync Job's spec at the end of its name: 24 bits tell one spec of a
# tier from the next (a Job name has 63 characters, and with six the longest spec name a
# Job allows, 39, is still past the 38 of the default weight-report CronJob).
DIGEST_CHARS = 6


def spec_digest(spec: Any) -> str:
    """The first DIGEST_CHARS hex digits of the SHA-256 of a Job's spec (canonical JSON):
    what names a weight-sync Job after its spec (``compiler.render.weight_sync``)."""
    text = json.dumps(spec, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(text.encode()).hexdigest()[:DIGEST_CHARS]


@dataclass(frozen=True)
class Names:
    connection_pool: str
    grpc_channel_args: str
    qos: str
    kyverno_policy: str
    admission_policy: str  # the native policies and their bindings, one name for the four
    rules: str
    weight_sync_account: str
    weight_store: str  # the in-cluster store's Deployment, Service and NetworkPolicy
    weight_report: str  # the CronJob that pushes again what each tier holds
    destination_rule: str
    weights_claim: str
    dashboard: str  # the Grafana dashboard's ConfigMap and GrafanaDashboard

    spec: str  # the spec's own name, which the per-tier names start with

    def engines(self, tier: str) -> str:
        """The headless Service that resolves to every ready engine pod of one tier."""
        return f"{self.spec}-{tier}-engines"

    def weight_sync(self, tier: str) -> str:
        """The weight-sync CronJob of one tier, or what its Job's name starts with (the Job
        adds its spec's digest: ``compiler.render.weight_sync``); ``""``: the common prefix."""
        return f"{self.weight_sync_account}-{tier}"


def of(spec: StandbySpec) -> Names:
    name, namespace = spec.metadata.name, spec.metadata.namespace
    return Names(
        connection_pool=f"{name}-connection-pool",
        grpc_channel_args=f"{name}-grpc-channel-args",
        qos=f"{name}-qos",
        # Cluster-scoped: the namespace is part of the name, joined with ".", which neither
        # DNS label holds, so team-a/llm and team/a-llm never share a policy.
        kyverno_policy=f"standbyc-{namespace}.{name}-egress",
        admission_policy=f"standbyc-{namespace}.{name}-egress",
        rules=f"{name}-failover",
        weight_sync_account=f"{name}-weight-sync",
        weight_store=f"{name}-weight-store",
        weight_report=f"{name}-weight-report",
        destination_rule=f"{name}-connection-pool",
        weights_claim=spec.spec.weight_sync.claim_name or f"{name}-weights",
        dashboard=f"{name}-dashboard",
        spec=name,
    )


_INVALID = re.compile(r"[^a-zA-Z0-9_]")
_CAPITAL = re.compile(r"([a-z0-9])([A-Z])")


def ksm_label(label_key: str) -> str:
    """kube-state-metrics' name for a pod label in kube_pod_labels: ``label_`` + the key
    sanitised (non-alphanumerics to ``_``), snake-cased (``standbyTier`` ->
    ``standby_Tier``) and lower-cased, as its internal/store/utils.go does."""
    return "label_" + _CAPITAL.sub(r"\1_\2", _INVALID.sub("_", label_key)).lower()
