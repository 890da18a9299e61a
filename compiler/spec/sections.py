"""Step 2: the StandbySpec model (pydantic v2, unknown fields refused).

Every default follows the seed design (three hot / two warm / one cold
replicas at 25/10/5 Gbit/s on a 100 Gbit/s link, a 14 GiB model), so a spec
with only ``metadata`` compiles; a spec that writes ``tiers`` runs only the tiers
it writes. Unit-carrying fields are parsed by
``compiler.units`` and stored as integers: bit/s, bytes, milliseconds.
"""

from __future__ import annotations

import re
from fractions import Fraction
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PlainSerializer,
    WithJsonSchema,
    model_validator,
)
from pydantic.alias_generators import to_camel

from compiler import units, urls

API_VERSION = "standbyc.dev/v1alpha1"
KIND = "StandbySpec"
TIER_NAMES: tuple[str, ...] = ("hot", "warm", "cold")
TierName = Literal["hot", "warm", "cold"]
DEFAULT_PRIORITY: dict[str, str] = {"hot": "guaranteed", "warm": "burstable", "cold": "besteffort"}

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
_LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$")
_URL = re.compile(r"^https?://[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]+$")
_STORE_URL = re.compile(r"^(https?://[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]+|s3://[a-z0-9./_-]+)$")
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z0-9]+){1,4}$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
_CRON = re.compile(
    r"^(@(hourly|daily|weekly|monthly|yearly|annually|midnight)"
    r"|[0-9A-Za-z*/,-]+( [0-9A-Za-z*/,-]+){4})$"
)
# minute, hour, day of month, month, day of week: their ranges, and the names cron accepts.
_CRON_FIELDS: tuple[tuple[str, int, int, tuple[str, ...]], ...] = (
    ("minute", 0, 59, ()),
    ("hour", 0, 23, ()),
    ("day of month", 1, 31, ()),
    ("month", 1, 12, ("JAN", "FEB", "MAR", "APR", "MAY", "JUN", "JUL", "AUG", "SEP", "OCT",
                      "NOV", "DEC")),
    ("day of week", 0, 7, ("SUN", "MON", "TUE", "WED", "THU", "FRI", "SAT")),
)  # fmt: skip


def _cron_value(text: str, field: tuple[str, int, int, tuple[str, ...]]) -> int:
    name, lo, hi, names = field
    upper = text.upper()
    if upper in names:
        return names.index(upper) + (1 if name == "month" else 0)
    if not text.isdigit() or not lo <= int(text) <= hi:
        raise ValueError(f"{text!r} is not a {name} ({lo}-{hi})")
    return int(text)


def _cron(value: str) -> str:
    """A cron schedule as Kubernetes CronJobs take it: five fields (or a @macro), each a
    list of ``*``, values or ranges with an optional ``/step``, within the field's range."""
    if not _CRON.fullmatch(value):  # fullmatch: no trailing newline either
        raise ValueError(
            f"{value!r} is not a cron schedule: five fields separated by single spaces "
            "(minute hour day-of-month month day-of-week), or @hourly, @daily, ..."
        )
    if value.startswith("@"):
        return value
    for text, field in zip(value.split(" "), _CRON_FIELDS, strict=True):
        for item in text.split(","):
            body, _, step = item.partition("/")
            if step and (not step.isdigit() or int(step) == 0):
                raise ValueError(f"{value!r}: step {step!r} in the {field[0]} field")
            if body == "*":
                continue
            first, _, last = body.partition("-")
            a = _cron_value(first, field)
            if last and _cron_value(last, field) < a:
                raise ValueError(f"{value!r}: range {body!r} runs backwards")
    return value


_MACRO_GAPS = {"@hourly": 60, "@daily": 1440, "@midnight": 1440, "@weekly": 10080}


def _cron_set(text: str, field: tuple[str, int, int, tuple[str, ...]]) -> set[int]:
    """The values one field of a valid schedule matches."""
    _, lo, hi, _ = field
    out: set[int] = set()
    for item in text.split(","):
        body, _, step = item.partition("/")
        if body == "*":
            a, b = lo, hi
        else:
            first, _, last = body.partition("-")
            a = _cron_value(first, field)
            b = _cron_value(last, field) if last else (hi if step else a)
        out.update(range(a, b + 1, int(step or 1)))
    return out


def cron_longest_gap(value: str) -> int | None:
    """The longest wait, in minutes, between two runs of a valid schedule, or None when
    the day-of-month or month field restricts it (then it runs days apart at best)."""
    if value.startswith("@"):
        return _MACRO_GAPS.get(value)
    fields = value.split(" ")
    if fields[2] != "*" or fields[3] != "*":
        return None
    minutes = _cron_set(fields[0], _CRON_FIELDS[0])
    hours = _cron_set(fields[1], _CRON_FIELDS[1])
    days = {d % 7 for d in _cron_set(fields[4], _CRON_FIELDS[4])}
    week = [
        day * 1440 + hour * 60 + minute
        for day in sorted(days)
        for hour in sorted(hours)
        for minute in sorted(minutes)
    ]
    return max(b - a for a, b in zip(week, [*week[1:], week[0] + 7 * 1440], strict=True))


_VERSION = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def _dns_label(value: str) -> str:
    if len(value) > 63 or not _DNS1123_LABEL.match(value):
        raise ValueError(
            f"{value!r} is not a valid Kubernetes name (DNS-1123 label: at most 63 characters, "
            "lowercase letters, digits and '-', starting and ending with a letter or digit)"
        )
    return value


def _label_key(value: str) -> str:
    prefix, _, name = value.rpartition("/")
    if prefix and (len(prefix) > 253 or not _DNS1123_SUBDOMAIN.match(prefix)):
        raise ValueError(f"label key {value!r} has an invalid prefix {prefix!r}")
    if len(name) > 63 or not _LABEL_NAME.match(name):
        raise ValueError(f"{value!r} is not a valid label key")
    return value


def _label_value(value: str) -> str:
    if value and (len(value) > 63 or not _LABEL_NAME.match(value)):
        raise ValueError(
            f"{value!r} is not a valid label value (at most 63 characters: letters, digits, "
            "'-', '_' and '.', starting and ending with a letter or digit)"
        )
    return value


def _schema(pattern: str, max_length: int | None = None) -> WithJsonSchema:
    """The same rule for editors: a JSON Schema pattern mirroring the validator."""
    schema: dict[str, Any] = {"type": "string", "pattern": pattern}
    if max_length is not None:
        schema["maxLength"] = max_length
    return WithJsonSchema(schema)


def _pattern(regex: re.Pattern[str], what: str) -> AfterValidator:
    def check(value: str) -> str:
        if not regex.match(value):
            raise ValueError(f"{value!r} is not a valid {what}")
        return value

    return AfterValidator(check)


def _no_control(value: str) -> str:
    if _CONTROL.search(value):
        raise ValueError("control characters are not allowed")
    return value


_LABEL_KEY_SCHEMA = (
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?"
    r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$"
)
Name = Annotated[str, AfterValidator(_dns_label), _schema(_DNS1123_LABEL.pattern, 63)]
LabelKey = Annotated[str, AfterValidator(_label_key), _schema(_LABEL_KEY_SCHEMA, 317)]
LabelValue = Annotated[
    str, AfterValidator(_label_value), _schema(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$", 63)
]
Labels = dict[LabelKey, LabelValue]
Image = Annotated[str, _pattern(_IMAGE, "container image reference"), _schema(_IMAGE.pattern)]


def _http_url(value: str) -> str:
    urls.http_url(value)  # what the weight-sync Job would refuse, refused here
    return value


Url = Annotated[
    str, _pattern(_URL, "http(s) URL"), AfterValidator(_http_url), _schema(_URL.pattern)
]


def _store_url(value: str) -> str:
    if urls.is_s3(value):
        urls.S3Url.parse(value)  # the publisher's and the Job's own check
    else:
        urls.http_url(value)
    return value


StoreUrl = Annotated[
    str,
    _pattern(_STORE_URL, "store URL (http(s):// or s3://bucket/prefix)"),
    AfterValidator(_store_url),
    _schema(_STORE_URL.pattern),
]
RoleArn = Annotated[
    str, _pattern(_ROLE_ARN, "IAM role ARN (arn:aws:iam::<account>:role/<name>)"),
    _schema(_ROLE_ARN.pattern),
]  # fmt: skip
Region = Annotated[str, _pattern(_REGION, "AWS region (for example eu-west-1)"),
                   _schema(_REGION.pattern)]  # fmt: skip
Quantity = Annotated[
    str,
    _pattern(_QUANTITY, "Kubernetes quantity (for example 500m, 2Gi)"),
    _schema(_QUANTITY.pattern),
]
Cron = Annotated[str, AfterValidator(_cron), _schema(_CRON.pattern)]
Version = Annotated[
    str,
    _pattern(_VERSION, "version (letters, digits, '.', '_', '+', '-')"),
    _schema(_VERSION.pattern),
]
# An absolute path below a directory (the mount point): /models/llama-7b, not /llama-7b.
_MODEL_PATH = re.compile(r"^(/[A-Za-z0-9._-]+)+/[A-Za-z0-9_-][A-Za-z0-9._-]*$")
ModelPath = Annotated[
    str,
    _pattern(_MODEL_PATH, "model path (an absolute path with a parent directory)"),
    _schema(_MODEL_PATH.pattern),
]
_KUBE_VERSION = re.compile(r"^1\.[0-9]{2}(\.[0-9]+)?$")
KubeVersion = Annotated[
    str, _pattern(_KUBE_VERSION, "Kubernetes version"), _schema(_KUBE_VERSION.pattern)
]
HostName = Annotated[
    str, _pattern(_DNS1123_SUBDOMAIN, "host name"), _schema(_DNS1123_SUBDOMAIN.pattern, 253)
]
FreeText = Annotated[str, AfterValidator(_no_control), Field(max_length=1024)]
Port = Annotated[int, Field(ge=1, le=65535)]
Count = Annotated[int, Field(ge=0, le=100_000)]
Positive = Annotated[int, Field(ge=1, le=1_000_000)]

BitsPerSecond = Annotated[
    int,
    BeforeValidator(units.parse_bandwidth),
    PlainSerializer(lambda v: units.k8s_quantity(v) + "bit/s", return_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": units.BANDWIDTH_PATTERN,
            "description": "bandwidth: b = bits, B = bytes (25Gbit/s, 25Gbps, 3GB/s); "
            "at most 1 Pbit/s",
            "examples": ["25Gbit/s", "500Mbit/s"],
        }
    ),
]
Bytes = Annotated[
    int,
    BeforeValidator(units.parse_size),
    PlainSerializer(units.exact_size, return_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": units.SIZE_PATTERN,
            "description": "size in bytes (14GiB, 512MB, 2KiB); at most 1 PiB",
            "examples": ["14GiB", "2KiB"],
        }
    ),
]
Millis = Annotated[
    int,
    BeforeValidator(units.parse_duration),
    PlainSerializer(units.prom_duration, return_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": units.DURATION_PATTERN,
            "description": "duration (300ms, 60s, 5m, 1h30m); at most a year",
            "examples": ["60s", "5m"],
        }
    ),
]
Ratio = Annotated[
    Fraction,
    BeforeValidator(units.parse_ratio),
    PlainSerializer(lambda v: f"{float(v) * 100:g}%", return_type=str),
    WithJsonSchema(
        {
            "type": "string",
            "pattern": units.PERCENT_PATTERN,
            "description": "a share, above 0% and at most 100%",
            "examples": ["50%", "2%"],
        }
    ),
]


def _between(lo: int, hi: int) -> AfterValidator:
    """A duration within [lo, hi] milliseconds, said in the spec's own units."""

    def check(value: int) -> int:
        if not lo <= value <= hi:
            raise ValueError(
                f"{units.prom_duration(value)} is out of range: from "
                f"{units.prom_duration(lo)} to {units.prom_duration(hi)}"
            )
        return value

    return AfterValidator(check)


class Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, alias_generator=to_camel, populate_by_name=True
    )


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
    | Annotated[str, _pattern(_SHARE_OF_PODS, "share of pods"), _schema(_SHARE_OF_PODS.pattern)]
)
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
ServedModelName = Annotated[
    str, _pattern(_MODEL_NAME, "model name"), _schema(_MODEL_NAME.pattern, 128)
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
    timeout: Annotated[Millis, _between(1000, 6 * 3600_000)] = Field(
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
    interval: Millis = 10_000
    payload: Bytes = 2 * 1024
    probers: Positive = 1


class Connections(Model):
    expected: Positive = 10_000
    migration_time: Millis = Field(5, description="time to move one connection to a new instance")


class Upstream(Model):
    keepalive: Positive = 120
    keepalive_requests: Positive = 10_000
    max_concurrent_streams: Positive = 1000


class Http2(Model):
    enabled: bool = True
    max_concurrent_streams: Positive = 1000


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


QosOutput = Literal["ciliumEgressQoS", "kyverno", "kustomizePatch"]


def _default_outputs() -> list[QosOutput]:
    return ["ciliumEgressQoS", "kyverno"]


def _all_tiers() -> list[TierName]:
    return ["hot", "warm", "cold"]


class Qos(Model):
    outputs: list[QosOutput] = Field(default_factory=_default_outputs, min_length=1)


class ArgoHookTrigger(Model):
    type: Literal["argocdHook"] = "argocdHook"
    hook: Literal["PreSync", "Sync", "PostSync"] = "PostSync"


class ScheduleTrigger(Model):
    type: Literal["schedule"]
    schedule: Cron


class Resources(Model):
    cpu_request: Quantity = "500m"
    memory_request: Quantity = "1Gi"
    cpu_limit: Quantity = "2"
    memory_limit: Quantity = "2Gi"


STORE_IMAGE = "docker.io/nginxinc/nginx-unprivileged:1.27-alpine"
SYNC_IMAGE = "standbyc:0.1.0"  # what the repository's Dockerfile builds (make image)


class IrsaCredentials(Model):
    type: Literal["irsa"]
    role_arn: RoleArn = Field(
        description="the IAM role the weight-sync ServiceAccount assumes (EKS IRSA: the "
        "ServiceAccount is annotated eks.amazonaws.com/role-arn; the pod identity webhook "
        "gives the pod a web identity token, which the Job exchanges with STS)"
    )


class SecretCredentials(Model):
    type: Literal["secret"]
    secret_name: Name = Field(
        description="a Secret in the namespace with AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY (and, optionally, AWS_SESSION_TOKEN), passed as env"
    )


class ProfileCredentials(Model):
    type: Literal["profile"]
    secret_name: Name = Field(
        description="a Secret in the namespace holding an AWS shared credentials file under "
        "the key `credentials` (and, optionally, a config file under `config`), mounted "
        "read-only"
    )
    profile: Annotated[str, _pattern(_LABEL_NAME, "profile name")] = Field(
        "default", description="the profile of that file to use"
    )


StoreCredentials = Annotated[
    IrsaCredentials | SecretCredentials | ProfileCredentials, Field(discriminator="type")
]


class WeightStore(Model):
    url: StoreUrl | None = Field(
        None,
        description="an external store: the base URL under which any static HTTP(S) server "
        "or object store serves what `standbyc weights publish` wrote, or s3://bucket/prefix "
        "for a private bucket (requests signed with `credentials`). Default: the "
        "in-cluster store standbyc emits (http://<name>-weight-store.<namespace>.svc:8080/)",
    )
    endpoint: Url | None = Field(
        None, description="s3:// store: an S3-compatible server (default: AWS's own)"
    )
    region: Region | None = Field(None, description="s3:// store: the bucket's region")
    credentials: StoreCredentials | None = Field(
        None,
        description="s3:// store: how the Job gets credentials (irsa, a Secret of keys, or a "
        "profile file from a Secret); none: whatever the node provides (instance role)",
    )
    claim_name: Name | None = Field(
        None,
        description="in-cluster store: the PVC (ReadWriteMany) the publisher writes the "
        "store into and the store server reads; default <name>-weight-store",
    )
    image: Image = Field(STORE_IMAGE, description="in-cluster store: a static file server")

    @model_validator(mode="after")
    def _s3_fields(self) -> WeightStore:
        if not (self.url and urls.is_s3(self.url)):
            for name in ("endpoint", "region", "credentials"):
                if getattr(self, name) is not None:
                    raise ValueError(f"{name}: only for an s3:// url")
        return self


class WeightReport(Model):
    pushgateway: Url | None = Field(
        "http://prometheus-pushgateway.monitoring.svc:9091",
        description="Pushgateway the weight-sync Jobs push standbyc_weights_generation to; "
        "null: no report, and no alerts on it",
    )
    schedule: Cron | None = Field(
        "*/10 * * * *",
        description="when the weight-report CronJob pushes again what each tier holds, so "
        "that a Pushgateway restart (without persistence it forgets every push) does not "
        "leave the weight alerts blind until the next sync; keep it more frequent than "
        "alerts.weightsUnreported.for. null: no CronJob",
    )


_CONFIG_KEY = re.compile(r"^[A-Za-z0-9][-._A-Za-z0-9]{0,252}$")
ConfigKey = Annotated[
    str, _pattern(_CONFIG_KEY, "Secret or ConfigMap key"), _schema(_CONFIG_KEY.pattern)
]
Identity = Annotated[FreeText, Field(min_length=1)]


class TrustFile(Model):
    """A file from a Secret or a ConfigMap of the namespace, mounted read-only into the
    weight-sync Jobs."""

    secret_name: Name | None = None
    config_map_name: Name | None = None
    key: ConfigKey = Field(description="the key that holds the file")

    @model_validator(mode="after")
    def _one_source(self) -> TrustFile:
        if (self.secret_name is None) == (self.config_map_name is None):
            raise ValueError("give exactly one of secretName and configMapName")
        return self


class KeyVerify(Model):
    type: Literal["key"]
    public_key: TrustFile = Field(description="the PEM public key (EC P-256, P-384, P-521)")


class CertificateVerify(Model):
    type: Literal["certificate"]
    certificate_chain: TrustFile = Field(
        description="PEM certificates the signing certificate must chain to (your root, "
        "and intermediates)"
    )
    identity: Identity = Field(
        description="what the signing certificate must carry: a subject alternative name "
        "(email, URI, DNS name), or its common name when it has none"
    )


class SigstoreVerify(Model):
    type: Literal["sigstore"]
    identity: Identity = Field(description="the signer's identity in its Fulcio certificate")
    issuer: Url = Field(description="the OIDC issuer that vouched for it")
    trust_root: TrustFile = Field(
        description="a Sigstore ClientTrustConfig JSON (its trusted root): the Job "
        "verifies offline, without TUF"
    )


Verify = Annotated[KeyVerify | CertificateVerify | SigstoreVerify, Field(discriminator="type")]


class WeightSync(Model):
    image: Image = Field(SYNC_IMAGE, description="an image with standbyc (see Dockerfile)")
    store: WeightStore = Field(default_factory=WeightStore)
    trigger: Annotated[ArgoHookTrigger | ScheduleTrigger, Field(discriminator="type")] = Field(
        default_factory=ArgoHookTrigger
    )
    tiers: list[TierName] = Field(default_factory=_all_tiers, min_length=1)
    bandwidth_share: Ratio = Field(
        Fraction(1, 2), description="share of a tier's egress that weight sync may use"
    )
    expected_delta: Ratio = Field(
        Fraction(2, 100), description="expected delta size as a share of the model, for the plan"
    )
    claim_name: Name | None = Field(
        None,
        description="PVC (ReadWriteMany) holding one checkpoint directory per tier, "
        "<tier>/<model.name>; default <name>-weights",
    )
    backoff_limit: Count = 3
    active_deadline: Millis | None = Field(
        None,
        description="each weight-sync Job's activeDeadlineSeconds. Default: 30m, or more for "
        "a tier whose engines reload, so that its whole reload fits at worst (every wave, "
        "every step taking reload.timeout); set lower than that, compile refuses",
    )
    ttl_after_finished: Millis | None = Field(
        None,
        description="delete finished Jobs after this long; a deleted failed Job no longer "
        "raises WeightSyncJobFailed (default: keep them)",
    )
    resources: Resources = Field(default_factory=Resources)
    report: WeightReport = Field(default_factory=WeightReport)
    verify: Verify | None = Field(
        None,
        description="swap in only generations their publisher signed (OpenSSF Model "
        "Signing, `standbyc weights publish --sign-key`), verified by the Job before the "
        "swap: with a public key, a certificate chain and identity, or a Sigstore identity. "
        "None: any writer of the store decides what is served",
    )


Severity = Literal["info", "warning", "critical"]


class RateAlert(Model):
    """A threshold over a rate window. Each alert's subclass gives its defaults, so a spec
    sets only what it changes (``bandwidthHigh: {window: 10m}``)."""

    threshold: BitsPerSecond
    window: Millis
    for_: Millis = Field(alias="for")
    severity: Severity
    keep_firing_for: Millis | None = Field(
        None,
        description="keep a firing alert firing this long after its expression turns false "
        "(Prometheus >= 2.42): one missed scrape leaves a rate window short of its first "
        "sample and would resolve the alert mid-incident. Default: two scrape intervals; "
        "0s turns it off",
    )


class BandwidthHighAlert(RateAlert):
    threshold: BitsPerSecond = 10 * 10**9
    window: Millis = 5 * 60_000
    for_: Millis = Field(5 * 60_000, alias="for")
    severity: Severity = "warning"


class FailoverSpikeAlert(RateAlert):
    threshold: BitsPerSecond = 50 * 10**9
    window: Millis = 2 * 60_000
    for_: Millis = Field(60_000, alias="for")
    severity: Severity = "critical"


class DurationAlert(Model):
    """An alert with only a ``for``; each alert's subclass gives its defaults."""

    for_: Millis = Field(alias="for")
    severity: Severity


class HotReplicasLowAlert(DurationAlert):
    for_: Millis = Field(2 * 60_000, alias="for")
    severity: Severity = "critical"


class WeightSyncFailedAlert(DurationAlert):
    for_: Millis = Field(60_000, alias="for")
    severity: Severity = "critical"


class WeightsBehindAlert(DurationAlert):
    for_: Millis = Field(15 * 60_000, alias="for")
    severity: Severity = "warning"


class WeightsUnreportedAlert(DurationAlert):
    for_: Millis = Field(30 * 60_000, alias="for")
    severity: Severity = "warning"


class WeightsNotServedAlert(DurationAlert):
    for_: Millis = Field(10 * 60_000, alias="for")
    severity: Severity = "warning"


class WeightsRefusedAlert(DurationAlert):
    for_: Millis = Field(60_000, alias="for")
    severity: Severity = "critical"


class TierLabelsMissingAlert(DurationAlert):
    for_: Millis = Field(15 * 60_000, alias="for")
    severity: Severity = "warning"


# Prometheus takes intervals in whole seconds at the finest worth having; an hour is as
# coarse as an alert on failover traffic can be.
Interval = Annotated[Millis, _between(1000, 3600_000)]


class Alerts(Model):
    evaluation_interval: Interval = 30_000
    scrape_interval: Interval = 30_000
    runbook_base_url: Url = "https://runbooks.example.com/standbyc"
    rule_labels: Labels = Field(
        default_factory=lambda: {"release": "kube-prometheus-stack"},
        description="labels on the PrometheusRule; a Prometheus run by prometheus-operator "
        "loads it only where its ruleSelector matches them (kube-prometheus-stack selects "
        "release: <its Helm release>; the default matches a release named "
        "kube-prometheus-stack)",
    )
    bandwidth_high: BandwidthHighAlert = Field(default_factory=BandwidthHighAlert)
    failover_spike: FailoverSpikeAlert = Field(default_factory=FailoverSpikeAlert)
    hot_replicas_low: HotReplicasLowAlert = Field(default_factory=HotReplicasLowAlert)
    weight_sync_failed: WeightSyncFailedAlert = Field(default_factory=WeightSyncFailedAlert)
    weights_behind: WeightsBehindAlert = Field(default_factory=WeightsBehindAlert)
    weights_unreported: WeightsUnreportedAlert = Field(default_factory=WeightsUnreportedAlert)
    weights_not_served: WeightsNotServedAlert = Field(default_factory=WeightsNotServedAlert)
    weights_refused: WeightsRefusedAlert = Field(default_factory=WeightsRefusedAlert)
    tier_labels_missing: TierLabelsMissingAlert = Field(default_factory=TierLabelsMissingAlert)


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
    folder: Annotated[str, _pattern(_FOLDER, "folder title"), _schema(_FOLDER.pattern)] = Field(
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


class Failover(Model):
    """One failover: ``failedReplicas`` serving pods fail and the ``takeover`` tier's standbys
    take their traffic. The plan (PLAN.md, ``standbyc plan``) times each phase against
    ``rto``."""

    rto: Millis | None = Field(
        None, description="recovery time objective: from the failure to serving again"
    )
    takeover: TierName = Field("hot", description="the tier whose standbys take over")
    failed_replicas: Positive = Field(1, description="serving pods that fail at once")
    weights: Literal["current", "behind", "missing"] = Field(
        "current",
        description="what the takeover tier holds when it happens: current (nothing moves), "
        "behind by a generation (the delta moves) or missing (a full copy moves)",
    )
    failure_threshold: Positive = Field(
        3, description="failed health checks in a row before a pod counts as failed"
    )
    drain: Millis = Field(5_000, description="time to drain the failed pods' requests")
    migration_parallelism: Positive = Field(
        1, description="connections moved to the new instances at once"
    )
    handshake: Bytes = Field(4096, description="bytes to re-establish one connection (TLS)")
    warmup: Millis = Field(
        30_000, description="time for an engine to start and load weights already on disk"
    )
    reload: Millis | None = Field(
        None,
        description="time for a running engine to load a new generation from disk (a tier "
        "whose reload is not restart). Default: model.size read at 2 GB/s, at most warmup; "
        "the weight-sync Job reports the time its engines took (reload.seconds)",
    )
    store_egress: BitsPerSecond | None = Field(
        None, description="egress of the weight store's server (default: network.link)"
    )
    strict: bool = Field(
        False,
        description="this spec's missed objective is an error: compile writes nothing and "
        "standbyc check (the pre-commit hook) fails, as with --strict",
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


def json_schema() -> dict[str, Any]:
    # Serialization mode writes every default the way a user writes it ("100Gbit/s"), so an
    # editor never suggests a value standbyc refuses.
    schema = StandbySpec.model_json_schema(by_alias=True, mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "StandbySpec"
    return schema
