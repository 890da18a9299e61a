"""The CRD openAPIV3Schema -> JSON schema converter."""

from __future__ import annotations

import json
from importlib import resources
from pathlib import Path

from ruamel.yaml import YAML

from compiler import kinds
from compiler.gate import crd, pins


def test_closes_objects_that_list_properties() -> None:
    out = crd.convert({"type": "object", "properties": {"a": {"type": "string"}}})
    assert out == {
        "type": "object",
        "properties": {"a": {"type": "string"}},
        "additionalProperties": False,
    }


def test_keeps_open_maps_and_preserved_fields_open() -> None:
    assert crd.convert({"type": "object", "additionalProperties": {"type": "string"}}) == {
        "type": "object",
        "additionalProperties": {"type": "string"},
    }
    preserved = crd.convert(
        {"type": "object", "properties": {"a": {}}, "x-kubernetes-preserve-unknown-fields": True}
    )
    assert "additionalProperties" not in preserved


def test_int_or_string_and_nullable() -> None:
    assert crd.convert({"x-kubernetes-int-or-string": True}) == {"type": ["integer", "string"]}
    assert crd.convert({"type": "string", "nullable": True}) == {"type": ["string", "null"]}


def test_junctor_branches_are_not_closed() -> None:
    """oneOf: [{properties: {a}}, ...] restates a subset; closing it would reject valid objects."""
    out = crd.convert(
        {
            "type": "object",
            "properties": {"a": {"type": "string"}, "b": {"type": "string"}},
            "oneOf": [{"properties": {"a": {}}, "required": ["a"]}, {"required": ["b"]}],
        }
    )
    assert out["additionalProperties"] is False
    assert all("additionalProperties" not in branch for branch in out["oneOf"])


def test_drops_cel_rules_and_allows_root_meta() -> None:
    doc = {
        "kind": "CustomResourceDefinition",
        "metadata": {"name": "things.example.io"},
        "spec": {
            "group": "example.io",
            "names": {"kind": "Thing"},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "properties": {"spec": {"type": "object"}},
                            "x-kubernetes-validations": [{"rule": "self.x > 1"}],
                        }
                    },
                },
                {"name": "v0", "served": False},
            ],
        },
    }
    (schema,) = crd.crd_schemas(doc)
    assert schema.filename == "thing-example-v1.json"
    assert set(schema.schema["properties"]) == {"apiVersion", "kind", "metadata", "spec"}
    assert "x-kubernetes-validations" not in json.dumps(schema.schema)


def test_our_crd_converts_strictly() -> None:
    text = resources.files("compiler").joinpath("data/crds/ciliumegressqoses.cilium.io.yaml")
    (doc,) = list(YAML(typ="safe", pure=True).load_all(text.read_text()))
    (schema,) = crd.crd_schemas(doc)
    selector = schema.schema["properties"]["spec"]["properties"]["selectors"]["items"]
    assert selector["additionalProperties"] is False
    assert selector["properties"]["priority"]["type"] == ["integer", "string"]


def test_pin_file_is_complete() -> None:
    p = pins.load()
    assert set(p.tools) == {
        "kubeconform",
        "promtool",
        "pint",
        "kubectl-kyverno",
        "kube-apiserver",
        "etcd",
    }
    optional = ["kubectl-kyverno", "kube-apiserver", "etcd"]
    assert [n for n, t in p.tools.items() if t.optional] == optional
    # The default matrix is the newest three minors the pinned package ships; the prebuilt
    # window, those and the three before them.
    import kubernetes_validate  # noqa: PLC0415

    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    minors = {
        ".".join(d.name.removeprefix("v").split(".")[:2])
        for d in root.iterdir()
        if d.name.startswith("v")
    }
    shipped = sorted(minors, key=lambda v: tuple(map(int, v.split("."))))
    assert list(p.kube_available) == shipped
    assert list(p.kube_default_matrix) == shipped[-3:]
    assert list(p.kube_prebuilt) == shipped[-6:]
    for src in p.crds:
        assert src.package_data or (src.module and src.version and src.sum and src.sha256)
    provided = {k for src in p.crds for k in src.kinds}
    # Every kind whose schema is not Kubernetes' own comes from exactly one pinned source.
    wanted = {k.kind for k in kinds.KINDS if k.schema != kinds.KUBERNETES}
    assert provided == wanted
    assert sum(len(src.kinds) for src in p.crds) == len(wanted)
