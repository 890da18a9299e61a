"""The spec's scalar types: names, labels, URLs and quantities checked as Kubernetes and
the weight-sync Job check them, and unit-carrying values parsed by ``compiler.units`` and
stored as integers (bit/s, bytes, milliseconds); and ``Model``, the base of every section
(unknown fields refused, camelCase keys)."""

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
)
from pydantic.alias_generators import to_camel

from compiler import units, urls
from compiler.spec.cron import CRON_PATTERN, check_cron

TIER_NAMES: tuple[str, ...] = ("hot", "warm", "cold")
TierName = Literal["hot", "warm", "cold"]

_DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_NAME = re.compile(r"^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_DNS1123_SUBDOMAIN = re.compile(
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
)
_IMAGE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/:@-]*$")
_URL = re.compile(r"^https?://[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]+$")
_STORE_URL = re.compile(r"^(https?://[A-Za-z0-9._~:/?#\[\]@!$&'()*+,;=%-]+|s3://[a-z0-9./_-]+)$")
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::[0-9]{12}:role/[A-Za-z0-9+=,.@_/-]{1,512}$")
_REGION = re.compile(r"^[a-z]{2}(-[a-z0-9]+){1,4}$")
_QUANTITY = re.compile(r"^[0-9]+(\.[0-9]+)?(m|k|M|G|T|P|E|Ki|Mi|Gi|Ti|Pi|Ei)?$")
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
    if len(name) > 63 or not LABEL_NAME.match(name):
        raise ValueError(f"{value!r} is not a valid label key")
    return value


def _label_value(value: str) -> str:
    if value and (len(value) > 63 or not LABEL_NAME.match(value)):
        raise ValueError(
            f"{value!r} is not a valid label value (at most 63 characters: letters, digits, "
            "'-', '_' and '.', starting and ending with a letter or digit)"
        )
    return value


def json_pattern(pattern: str, max_length: int | None = None) -> WithJsonSchema:
    """The same rule for editors: a JSON Schema pattern mirroring the validator."""
    schema: dict[str, Any] = {"type": "string", "pattern": pattern}
    if max_length is not None:
        schema["maxLength"] = max_length
    return WithJsonSchema(schema)


def pattern(regex: re.Pattern[str], what: str) -> AfterValidator:
    """A string that ``regex`` matches, else "not a valid ``what``"."""

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
Name = Annotated[str, AfterValidator(_dns_label), json_pattern(_DNS1123_LABEL.pattern, 63)]
LabelKey = Annotated[str, AfterValidator(_label_key), json_pattern(_LABEL_KEY_SCHEMA, 317)]
LabelValue = Annotated[
    str,
    AfterValidator(_label_value),
    json_pattern(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$", 63),
]
Labels = dict[LabelKey, LabelValue]
Image = Annotated[str, pattern(_IMAGE, "container image reference"), json_pattern(_IMAGE.pattern)]


def _http_url(value: str) -> str:
    urls.http_url(value)  # what the weight-sync Job would refuse, refused here
    return value


Url = Annotated[
    str, pattern(_URL, "http(s) URL"), AfterValidator(_http_url), json_pattern(_URL.pattern)
]


def _store_url(value: str) -> str:
    if urls.is_s3(value):
        urls.S3Url.parse(value)  # the publisher's and the Job's own check
    else:
        urls.http_url(value)
    return value


StoreUrl = Annotated[
    str,
    pattern(_STORE_URL, "store URL (http(s):// or s3://bucket/prefix)"),
    AfterValidator(_store_url),
    json_pattern(_STORE_URL.pattern),
]
RoleArn = Annotated[
    str, pattern(_ROLE_ARN, "IAM role ARN (arn:aws:iam::<account>:role/<name>)"),
    json_pattern(_ROLE_ARN.pattern),
]  # fmt: skip
Region = Annotated[str, pattern(_REGION, "AWS region (for example eu-west-1)"),
                   json_pattern(_REGION.pattern)]  # fmt: skip
Quantity = Annotated[
    str,
    pattern(_QUANTITY, "Kubernetes quantity (for example 500m, 2Gi)"),
    json_pattern(_QUANTITY.pattern),
]
Cron = Annotated[str, AfterValidator(check_cron), json_pattern(CRON_PATTERN.pattern)]
Version = Annotated[
    str,
    pattern(_VERSION, "version (letters, digits, '.', '_', '+', '-')"),
    json_pattern(_VERSION.pattern),
]
# An absolute path below a directory (the mount point): /models/llama-7b, not /llama-7b.
_MODEL_PATH = re.compile(r"^(/[A-Za-z0-9._-]+)+/[A-Za-z0-9_-][A-Za-z0-9._-]*$")
ModelPath = Annotated[
    str,
    pattern(_MODEL_PATH, "model path (an absolute path with a parent directory)"),
    json_pattern(_MODEL_PATH.pattern),
]
_KUBE_VERSION = re.compile(r"^1\.[0-9]{2}(\.[0-9]+)?$")
KubeVersion = Annotated[
    str, pattern(_KUBE_VERSION, "Kubernetes version"), json_pattern(_KUBE_VERSION.pattern)
]
HostName = Annotated[
    str, pattern(_DNS1123_SUBDOMAIN, "host name"), json_pattern(_DNS1123_SUBDOMAIN.pattern, 253)
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


def between(lo: int, hi: int) -> AfterValidator:
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
