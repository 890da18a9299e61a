"""The StandbySpec model, section by section (the weightSync section in ``weight_sync``, the
alerts section in ``alerts``, the scalar types in ``types``).

Every default follows the seed design (three hot / two warm / one cold
replicas at 25/10/5 Gbit/s on a 100 Gbit/s link, a 14 GiB model), so a spec
with only ``metadata`` compiles; a spec that writes ``tiers`` runs only the tiers
it writes.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import ConfigDict, Field, create_model, model_validator

from compiler.spec.alerts import Alerts
from compiler.spec.failover import Failover
from compiler.spec.types import (
    TIER_NAMES,
    BitsPerSecond,
    Bytes,
    Count,
    FreeText,
    HostName,
    KubeVersion,
    LabelKey,
    Labels,
    Millis,
    Model,
    ModelPath,
    Name,
    Port,
    Positive,
    Version,
    between,
    json_pattern,
    pattern,
)
from compiler.spec.weight_sync import WeightSync

API_VERSION = "standbyc.dev/v1alpha1"
KIND = "StandbySpec"
DEFAULT_PRIORITY: dict[str, str] = {"hot": "guaranteed", "warm": "burstable", "cold": "besteffort"}


# --- the spec -----------------------------------------------------------------


class Metadata(Model):
    name: Name
    namespace: Name = "default"
    labels: Labels = Field(default_factory=dict)


class EnginePorts(Model):
    serving: Port = 8000
    metrics: Port | None = None


ReloadApi = Literal["restart", "sglang", "vllm", "triton"]
_SHARE_OF_PODS = re.compile(r"^(100|[1-9][0-9]?)%$")
MaxUnavailable = (
    Annotated[int, Field(ge=1, le=256)]
    | Annotated[str, pattern(_SHARE_OF_PODS, "share of pods"), json_pattern(_SHARE_OF_PODS.pattern)]
)
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
ServedModelName = Annotated[
    str, pattern(_MODEL_NAME, "model name"), json_pattern(_MODEL_NAME.pattern, 128)
]


class Reload(Model):
    """How a tier's running engines take a new generation (docs/engine-reload.md)."""

    api: ReloadApi = Field(
        "restart",
        description="restart: the engines load the new model directory when they next start "
        "(nothing asks them). sglang (>= 0.5.6), vllm (>= 0.16.0, VLLM_SERVER_DEV_MODE=1) or "
        "triton (>= 2.34, --model-control-mode=explicit): after each verified swap the "
        "weight-sync Job asks the tier's pods to load it, maxUnavailable at a time, through "
        "a headless Service, and reads back what each serves",
    )
    port: Port | None = Field(
        None, description="the engines' HTTP API port (default engine.ports.serving)"
    )
    timeout: Annotated[Millis, between(1000, 6 * 3600_000)] = Field(
        10 * 60_000,
        description="how long one long step of a pod may take: its load, and vLLM's drain of "
        "the requests in flight",
    )
    model: ServedModelName | None = Field(
        None, description="triton: the model's name in its repository (default model.name)"
    )
    max_unavailable: MaxUnavailable = Field(
        1,
        description="pods of the tier asked to load at once, a number or a share of replicas "
        "(rounded down, at least 1); the rest keep serving, and a wave with a failure ends "
        "the reload",
    )
    swap: Literal["sideBySide", "unloadFirst"] | None = Field(
        None,
        description="triton only: sideBySide (default) loads a new instance beside the old "
        "one, which serves until the new one is ready and if it fails (needs memory for two); "
        "unloadFirst unloads the model first (the pod serves nothing during its load)",
    )

    @model_validator(mode="after")
    def _swap_is_tritons(self) -> Reload:
        if self.swap is not None and self.api != "triton":
            raise ValueError(f"swap: only for api triton (the {self.api} engines load in place)")
        return self


class Engine(Model):
    selector: Labels = Field(
        default_factory=lambda: {"app": "inference-engine"},
        description="labels every engine pod carries (a matchLabels selector)",
    )
    tier_label: LabelKey = Field("tier", description="label key whose value is hot, warm or cold")
    protocol: Literal["http", "grpc"] = "http"
    ports: EnginePorts = Field(default_factory=EnginePorts)
    reload: Reload = Field(
        default_factory=Reload,
        description="how the engines take a new generation; tiers.<tier>.reload overrides it",
    )


class Network(Model):
    link: BitsPerSecond = Field(100 * 10**9, description="bandwidth of the shared link")


Priority = Literal["guaranteed", "burstable", "besteffort"] | Annotated[int, Field(ge=0, le=1000)]


def _egress_when_on(schema: dict[str, Any]) -> None:
    """Editors ask for an egress limit exactly where standbyc does: on a tier with replicas."""
    schema["required"] = ["replicas"]
    schema["if"] = {"properties": {"replicas": {"minimum": 1}}, "required": ["replicas"]}
    schema["then"] = {"required": ["egress"]}


class Tier(Model):
    model_config = ConfigDict(**Model.model_config, json_schema_extra=_egress_when_on)

    replicas: Count = Field(
        description="standby pods of the tier; 0 turns the tier off (no pods counted against "
        "the link, no weight-sync Job, no alerts on it)"
    )
    egress: BitsPerSecond | None = Field(
        None, description="egress limit per pod; required when replicas is above 0"
    )
    priority: Priority | None = Field(
        None,
        description="Cilium Network QoS class; "
        "default hot=guaranteed, warm=burstable, cold=besteffort",
    )
    reload: Reload | None = Field(
        None, description="how this tier's engines take a new generation (default engine.reload)"
    )

    @property
    def egress_bps(self) -> int:
        """The per-pod limit (0 for a tier that is off; admit.py refuses one with replicas
        and no limit)."""
        return self.egress or 0


# A tier that is not written, or written as null: it runs nothing.
_OFF = Tier(replicas=0)


class Tiers(Model):
    """Exactly the tiers the spec writes: one left out (or null, or with replicas: 0) is off.
    A spec that leaves out ``tiers`` altogether gets the design's three (``_seed_tiers``)."""

    hot: Tier | None = Field(None, description="the tier that takes over first")
    warm: Tier | None = Field(None, description="not written, or null: no warm tier")
    cold: Tier | None = Field(None, description="not written, or null: no cold tier")

    def get(self, name: str) -> Tier:
        tier: Tier | None = getattr(self, name)
        return _OFF if tier is None else tier

    def items(self) -> list[tuple[str, Tier]]:
        return [(name, self.get(name)) for name in TIER_NAMES]


# The design's tiers: what a spec that writes no ``tiers`` runs.
SEED_TIERS: dict[str, dict[str, Any]] = {
    "hot": {"replicas": 3, "egress": "25Gbit/s"},
    "warm": {"replicas": 2, "egress": "10Gbit/s"},
    "cold": {"replicas": 1, "egress": "5Gbit/s"},
}


def _seed_tiers() -> Tiers:
    return Tiers.model_validate(SEED_TIERS)


def _seed_default(schema: dict[str, Any]) -> None:
    schema["default"] = {name: dict(tier) for name, tier in SEED_TIERS.items()}


class ModelInfo(Model):
    name: Name = "model"
    format: Literal["safetensors"] = "safetensors"
    size: Bytes = 14 * 2**30
    path: ModelPath = Field(
        "/models/model",
        description="where the engine reads the checkpoint: standby pods mount the weights "
        "claim with subPath <tier> at its parent directory",
    )
    version: Version = "v1"
    generation: Positive = Field(
        1,
        description="monotonic number of the version; "
        "standbys report it as standbyc_weights_generation",
    )


class HealthChecks(Model):
    """Your engine pods' readinessProbe, as your Deployment declares it. standbyc emits no
    probe: the plan reads these to time how long a hung engine stays in its Service, and to
    count what probing costs."""

    interval: Millis = Field(10_000, description="the probe's periodSeconds")
    timeout: Millis = Field(1_000, description="the probe's timeoutSeconds (Kubernetes: 1s)")
    failure_threshold: Positive = Field(
        3,
        description="the probe's failureThreshold: failed probes in a row before the pod "
        "is taken out of its Service",
    )
    payload: Bytes = Field(2 * 1024, description="bytes one probe moves, request and answer")
    probers: Positive = Field(1, description="who probes each pod (the kubelet: 1)")


class Connections(Model):
    expected: Positive = Field(
        10_000,
        description="client connections to the engine's Service: Istio's maxConnections, and "
        "the handshakes a failover's reconnects cost",
    )
    read_timeout: Annotated[Millis, between(1000, 3600_000)] = Field(
        60_000,
        description="http: how long a proxy waits on an upstream that sends nothing before it "
        "gives up on it (emitted as ingress-nginx's proxy-read-timeout); the plan's bound "
        "on noticing a silent node or a hung engine over HTTP",
    )


class Upstream(Model):
    keepalive: Positive = 120
    keepalive_requests: Positive = 10_000
    max_concurrent_streams: Positive = 1000


class Http2(Model):
    enabled: bool = True
    max_concurrent_streams: Positive = 1000


class ReconnectBackoff(Model):
    """gRPC's reconnect backoff, emitted as the client's grpc.initial_reconnect_backoff_ms
    and grpc.max_reconnect_backoff_ms."""

    initial: Annotated[Millis, between(1, 120_000)] = Field(
        1_000, description="the wait before the first reconnect (gRPC: 1s)"
    )
    max: Annotated[Millis, between(1, 3_600_000)] = Field(
        120_000, description="the longest wait between reconnects (gRPC: 2m)"
    )


class Grpc(Model):
    keepalive_time: Millis = 60_000
    keepalive_timeout: Millis = 5_000
    max_connection_age: Millis = Field(
        300_000,
        description="server: send GOAWAY after a connection's age, so clients spread over "
        "new standbys after a failover",
    )
    max_connection_age_grace: Millis | None = Field(
        None,
        description="server: how long streams in flight may run after that GOAWAY before "
        "the connection is closed. Unset: gRPC's default, no limit, so a long LLM stream "
        "is never cut; a value cuts every stream still running that long after GOAWAY",
    )
    server_min_ping_interval: Millis = Field(
        30_000,
        description="server-side grpc.http2.min_ping_interval_without_data_ms; "
        "must not exceed keepaliveTime",
    )
    permit_without_calls: bool = True
    reconnect_backoff: ReconnectBackoff | None = Field(
        None,
        description="client: how soon a channel reconnects after its connection broke. Unset: "
        "gRPC's own backoff (1s, then x1.6 up to 2m, jitter 20%)",
    )


class Istio(Model):
    enabled: bool = False
    host: HostName | None = None
    mode: Literal["sidecar", "ambient"] = Field(
        "sidecar",
        description="how the namespace is in the mesh (whether or not enabled emits the "
        "DestinationRule). ambient: traffic between pods arrives on the HBONE port 15008 and "
        "the kubelet's probes from 169.254.7.127, so the weight store's NetworkPolicy admits both",
    )


class ConnectionPool(Model):
    upstream: Upstream = Field(default_factory=Upstream)
    http2: Http2 = Field(default_factory=Http2)
    grpc: Grpc = Field(default_factory=Grpc)
    istio: Istio = Field(default_factory=Istio)


QosOutput = Literal["ciliumEgressQoS", "kyverno", "admissionPolicy", "kustomizePatch"]


def _default_outputs() -> list[QosOutput]:
    return ["ciliumEgressQoS", "kyverno"]


class Qos(Model):
    outputs: list[QosOutput] = Field(
        default_factory=_default_outputs,
        min_length=1,
        description="what carries the tiers' QoS: ciliumEgressQoS (the design's object, which "
        "Cilium does not act on), and what puts the annotations Cilium reads on the tier "
        "Pods: kyverno (a Kyverno ClusterPolicy), admissionPolicy (Kubernetes' own "
        "MutatingAdmissionPolicy and ValidatingAdmissionPolicy, Kubernetes >= 1.36), "
        "kustomizePatch (a kustomize component for your Deployments)",
    )


class GrafanaOperator(Model):
    """A grafana-operator ``GrafanaDashboard`` that loads the dashboard's ConfigMap."""

    instance_selector: Labels = Field(
        min_length=1,
        description="labels of the Grafana resources (grafana.integreatly.org/v1beta1) that "
        "load the dashboard: the GrafanaDashboard's spec.instanceSelector.matchLabels",
    )
    allow_cross_namespace_import: bool = Field(
        False,
        description="let Grafana resources in other namespaces load it (the operator's "
        "spec.allowCrossNamespaceImport)",
    )


_FOLDER = re.compile(r"^[^\x00-\x1f\x7f/\\]{1,128}$")


class DashboardSettings(Model):
    """The Grafana dashboard of the spec (README: Dashboard)."""

    enabled: bool = Field(
        True,
        description="emit a Grafana dashboard of the spec's egress, failover, ready pods and "
        "weights, in a ConfigMap that kube-prometheus-stack's Grafana sidecar loads",
    )
    sidecar_labels: Labels = Field(
        default_factory=lambda: {"grafana_dashboard": "1"},
        description="labels on the dashboard's ConfigMap: what the Grafana sidecar selects "
        "(kube-prometheus-stack: grafana.sidecar.dashboards.label and labelValue, default "
        'grafana_dashboard: "1")',
    )
    folder: Annotated[str, pattern(_FOLDER, "folder title"), json_pattern(_FOLDER.pattern)] = Field(
        "standbyc", description="the Grafana folder the dashboard is filed in"
    )
    folder_annotation: LabelKey = Field(
        "grafana_folder",
        description="the ConfigMap annotation holding the folder: the sidecar's "
        "folderAnnotation (it files the dashboard there with "
        "provider.foldersFromFilesStructure: true)",
    )
    grafana_operator: GrafanaOperator | None = Field(
        None, description="also emit a grafana-operator GrafanaDashboard; null: none"
    )


class Validation(Model):
    kubernetes_versions: list[KubeVersion] | None = Field(
        None, description="Kubernetes versions to validate against (default: the matrix)"
    )


class Spec(Model):
    engine: Engine = Field(default_factory=Engine)
    network: Network = Field(default_factory=Network)
    tiers: Tiers = Field(
        default_factory=_seed_tiers,
        description="the standby tiers, each only when written; left out: the design's "
        "three (hot 3 x 25Gbit/s, warm 2 x 10Gbit/s, cold 1 x 5Gbit/s)",
        json_schema_extra=_seed_default,
    )
    model: ModelInfo = Field(default_factory=ModelInfo)
    health_checks: HealthChecks = Field(default_factory=HealthChecks)
    connections: Connections = Field(default_factory=Connections)
    connection_pool: ConnectionPool = Field(default_factory=ConnectionPool)
    qos: Qos = Field(default_factory=Qos)
    weight_sync: WeightSync = Field(default_factory=WeightSync)
    alerts: Alerts = Field(default_factory=Alerts)
    dashboard: DashboardSettings = Field(default_factory=DashboardSettings)
    failover: Failover = Field(default_factory=Failover)
    validation: Validation = Field(default_factory=Validation)
    common_annotations: dict[LabelKey, FreeText] = Field(
        default_factory=dict, description="annotations added to every emitted object"
    )


class StandbySpec(Model):
    """A model served by hot, warm and cold standby tiers, and the network they share."""

    api_version: Literal["standbyc.dev/v1alpha1"] = Field(alias="apiVersion")
    kind: Literal["StandbySpec"]
    metadata: Metadata
    spec: Spec = Field(default_factory=Spec)


def with_alerts(alerts: type[Alerts], module: str) -> tuple[type[Spec], type[StandbySpec]]:
    """``Spec`` and ``StandbySpec`` whose alerts section is ``alerts``: the model a spec is
    admitted by, once the alert registry has added every alert's settings
    (``compiler.alerts``). The classes say they live in ``module``, which must hold them by
    their names."""
    spec = create_model(
        "Spec", __base__=Spec, __module__=module,
        alerts=(alerts, Field(default_factory=alerts)),
    )  # fmt: skip
    return spec, create_model(
        "StandbySpec", __base__=StandbySpec, __module__=module, __doc__=StandbySpec.__doc__,
        spec=(spec, Field(default_factory=spec)),
    )  # fmt: skip


def json_schema(model: type[StandbySpec]) -> dict[str, Any]:
    # Serialization mode writes every default the way a user writes it ("100Gbit/s"), so an
    # editor never suggests a value standbyc refuses.
    schema = model.model_json_schema(by_alias=True, mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "StandbySpec"
    return schema
