"""Convert a CustomResourceDefinition's ``openAPIV3Schema`` into a JSON schema for kubeconform.

The CRD dialect is OpenAPI v3 plus Kubernetes extensions. What changes:

* ``nullable: true`` becomes a ``"null"`` member of ``type``;
* ``x-kubernetes-int-or-string`` becomes ``type: [integer, string]``;
* an object that lists ``properties`` and neither sets ``additionalProperties`` nor
  ``x-kubernetes-preserve-unknown-fields`` gets ``additionalProperties: false``, so an
  unknown field is an error, as the API server's pruning would silently drop it;
* other ``x-kubernetes-*`` keys are dropped (CEL rules cannot be checked offline).

Strictness is added only on the structural skeleton. Branches of ``allOf``/``anyOf``/
``oneOf``/``not`` are value validations that restate a subset of the properties (for
example ``oneOf: [{required: [a]}, {required: [b]}]``); closing them would reject valid
objects, so they are converted but never closed.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

JSONSCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"

_JUNCTORS = ("allOf", "anyOf", "oneOf")
_EMBEDDED_META = {
    "apiVersion": {"type": "string"},
    "kind": {"type": "string"},
    "metadata": {"type": "object"},
}


@dataclass(frozen=True)
class CrdVersionSchema:
    kind: str
    group: str
    version: str
    schema: dict[str, Any]

    @property
    def filename(self) -> str:
        """kubeconform's ``{{.ResourceKind}}{{.KindSuffix}}.json`` for this kind."""
        return f"{self.kind.lower()}-{self.group.split('.')[0]}-{self.version}.json"


def _convert_value(key: str, value: Any, structural: bool) -> Any:
    if key == "properties":
        return {name: convert(sub, structural=structural) for name, sub in value.items()}
    if key in ("items", "additionalProperties") and isinstance(value, Mapping):
        return convert(value, structural=structural)
    if key in _JUNCTORS:
        return [convert(sub, structural=False) for sub in value]
    if key == "not":
        return convert(value, structural=False)
    return value


def convert(node: Mapping[str, Any], *, structural: bool = True) -> dict[str, Any]:
    """Convert one OpenAPI v3 (CRD dialect) schema node into JSON schema."""
    out: dict[str, Any] = {
        key: _convert_value(key, value, structural)
        for key, value in node.items()
        if key != "nullable" and not key.startswith("x-kubernetes-")
    }
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    if node.get("nullable") and "type" in out:
        types = out["type"] if isinstance(out["type"], list) else [out["type"]]
        out["type"] = [*types, "null"]

    if node.get("x-kubernetes-embedded-resource") and "properties" in out:
        # An embedded object always carries apiVersion/kind/metadata, listed or not.
        for name, sub in _EMBEDDED_META.items():
            out["properties"].setdefault(name, dict(sub))
    closable = "properties" in out and "additionalProperties" not in node
    if structural and closable and not node.get("x-kubernetes-preserve-unknown-fields"):
        out["additionalProperties"] = False
    return out


def iter_crds(documents: list[Any]) -> Iterator[Mapping[str, Any]]:
    for doc in documents:
        if isinstance(doc, Mapping) and doc.get("kind") == "CustomResourceDefinition":
            yield doc


def crd_schemas(crd: Mapping[str, Any]) -> list[CrdVersionSchema]:
    """One JSON schema per served version of ``crd`` (apiextensions.k8s.io/v1 only)."""
    spec = crd["spec"]
    kind = spec["names"]["kind"]
    group = spec["group"]
    result: list[CrdVersionSchema] = []
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        openapi = version.get("schema", {}).get("openAPIV3Schema")
        if openapi is None:
            raise ValueError(
                f"CRD {crd['metadata']['name']} version {version['name']} has no schema"
            )
        schema = {"$schema": JSONSCHEMA_DIALECT, **convert(openapi)}
        # Every object has apiVersion/kind/metadata even when the CRD does not list them
        # (Istio's do not); a closed root must still allow them.
        props = schema.setdefault("properties", {})
        for name, sub in _EMBEDDED_META.items():
            props.setdefault(name, dict(sub))
        result.append(CrdVersionSchema(kind, group, version["name"], schema))
    return result
