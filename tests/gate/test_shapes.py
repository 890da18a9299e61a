"""kubeconform runs once per schema shape: a manifest whose schema at a later Kubernetes
version differs from an earlier one only in its descriptions takes that version's result,
and one whose schema really changed is validated again, with the verdict of its own
version."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from compiler.gate import kubeconform
from compiler.reuse import shapes
from compiler.validation import run_gate

FIXTURES = Path(__file__).parent / "fixtures"
SERVICE = """\
# standbyc: generated — do not edit. Source: specs/x.yaml
apiVersion: v1
kind: Service
metadata:
  name: store
  namespace: serving
spec:
  selector: {app: store}
  ports: [{port: 8080}]
  trafficDistribution: PreferClose
"""

# The releases these tests read schema changes across (1.30 added a Service field, 1.31
# removed a PodSpec field, 1.34 added one): the older window, validated when asked.
VERSIONS = ("1.29", "1.30", "1.31", "1.32", "1.33", "1.34")


def test_a_shape_leaves_out_descriptions_and_api_server_annotations_only() -> None:
    schema = {
        "description": "a ConfigMap",
        "properties": {
            "description": {"type": "string", "description": "a field named description"},
            "mode": {"enum": [{"description": "kept: data, not a schema"}]},
            "ports": {"type": "array", "x-kubernetes-list-type": "atomic"},
            "x-kubernetes-field": {"type": "string"},  # a property of that name stays
        },
        "x-kubernetes-list-map-keys": ["uid"],
    }
    assert shapes._shape(schema) == {
        "properties": {
            "description": {"type": "string"},
            "mode": {"enum": [{"description": "kept: data, not a schema"}]},
            "ports": {"type": "array"},
            "x-kubernetes-field": {"type": "string"},
        }
    }


@pytest.fixture
def spied(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """The files kubeconform really ran on, per version (the real tool still runs)."""
    ran: dict[str, list[str]] = {}
    real = kubeconform.run

    def run(schema_dir: Any, version: str, files: list[str], **kw: Any) -> kubeconform.Run:
        ran[version] = list(files)
        return real(schema_dir, version, files, **kw)

    monkeypatch.setattr(kubeconform, "run", run)
    return ran


def test_a_schema_that_never_changed_is_validated_once(
    validators: Path, spied: dict[str, list[str]]
) -> None:
    report = run_gate(FIXTURES / "good", schema_dir=validators, display_root="out",
                      kube_versions=VERSIONS)  # fmt: skip
    assert report.ok, report.summary_text()
    first, *later = VERSIONS
    rule = "inference-system/seed/prometheusrule-seed-egress.yaml"
    deployment = "inference-system/seed/deployment-llm-hot.yaml"
    assert rule in spied[first] and not any(rule in spied.get(v, []) for v in later)
    # PodSpec grows each release: only 1.31, which removed a field, is validated again.
    assert [v for v in VERSIONS if deployment in spied.get(v, [])] == [first, "1.31"]
    assert all(v.valid == 11 for v in report.versions)


def test_a_field_a_later_version_adds_is_validated_there(
    tmp_path: Path, validators: Path, spied: dict[str, list[str]]
) -> None:
    """1.32-1.34 only add fields to a Deployment's schema: a pass at 1.31 stands for them,
    but a failure there is validated again at each (hostnameOverride arrived in 1.34)."""
    root = tmp_path / "out"
    shutil.copytree(FIXTURES / "good", root)
    path = root / "inference-system/seed/deployment-llm-hot.yaml"
    text = path.read_text()
    assert "      serviceAccountName: seed-standby\n" in text
    account = "      serviceAccountName: seed-standby\n"
    path.write_text(text.replace(account, account + "      hostnameOverride: llm\n"))
    report = run_gate(root, schema_dir=validators, display_root="out", kube_versions=VERSIONS)
    (finding,) = report.errors
    assert finding.pointer == "/spec/template/spec/hostnameOverride"
    assert finding.kube_versions == ("1.29", "1.30", "1.31", "1.32", "1.33")
    assert [v.invalid for v in report.versions] == [1, 1, 1, 1, 1, 0]
    rel = "inference-system/seed/deployment-llm-hot.yaml"  # failed each time: run at each
    assert all(rel in spied[v] for v in VERSIONS)


def test_extends_adds_only_where_nothing_else_is_allowed() -> None:
    closed = {"type": "object", "properties": {"a": {"type": "string"}},
              "additionalProperties": False, "required": ["a"]}  # fmt: skip
    more = {**closed, "properties": {"a": {"type": "string"}, "b": {"type": "integer"}}}
    assert shapes.extends(closed, more)
    assert not shapes.extends(more, closed)  # a removed field
    opened = {k: v for k, v in closed.items() if k != "additionalProperties"}
    assert not shapes.extends(opened, {**opened, "properties": more["properties"]})
    assert not shapes.extends(closed, {**more, "required": ["a", "b"]})
    assert not shapes.extends(closed, {**closed, "properties": {"a": {"type": "integer"}}})
    assert shapes.extends({"$defs": {"x": closed}}, {"$defs": {"x": more, "y": {}}})
    ref = {"$ref": "#/$defs/x"}
    assert not shapes.extends({"$defs": {"x": closed}, "items": ref}, {"$defs": {}, "items": ref})
    assert shapes.extends({"anyOf": [closed]}, {"anyOf": [more]})
    assert not shapes.extends({"oneOf": [closed]}, {"oneOf": [more]})  # two may match now
    assert not shapes.extends({"not": closed}, {"not": more})


def test_extends_refuses_a_grown_definition_under_one_of_or_not() -> None:
    """A definition that accepts more, referenced under ``oneOf``: a document that matched
    one branch may now match two, and be refused."""
    closed = {"type": "object", "properties": {"a": {"type": "string"}},
              "additionalProperties": False}  # fmt: skip
    more = {**closed, "properties": {"a": {"type": "string"}, "b": {"type": "string"}}}
    one_of = {"oneOf": [{"$ref": "#/$defs/x"}, {"required": ["b"]}]}
    assert not shapes.extends({"$defs": {"x": closed}, **one_of}, {"$defs": {"x": more}, **one_of})
    # through another definition, and under "definitions"
    chained = {"not": {"$ref": "#/definitions/y"}}
    old = {"definitions": {"x": closed, "y": {"$ref": "#/definitions/x"}}, **chained}
    new = {"definitions": {"x": more, "y": {"$ref": "#/definitions/x"}}, **chained}
    assert not shapes.extends(old, new)
    # the same definition referenced where accepting more is safe still extends
    plain = {"items": {"$ref": "#/$defs/x"}}
    assert shapes.extends({"$defs": {"x": closed}, **plain}, {"$defs": {"x": more}, **plain})


def test_extends_refuses_properties_added_beside_pattern_properties() -> None:
    """A property added where a pattern already covered its name: both schemas apply
    to it now, and the new one may refuse a value the pattern's accepted."""
    old = {"type": "object", "properties": {}, "additionalProperties": False,
           "patternProperties": {"^x-": {"type": "string"}}}  # fmt: skip
    new = {**old, "properties": {"x-a": {"type": "integer"}}}
    assert not shapes.extends(old, new)


def test_a_field_only_later_versions_know_fails_only_before_them(
    tmp_path: Path, validators: Path
) -> None:
    root = tmp_path / "out"
    shutil.copytree(FIXTURES / "good", root)
    (root / "inference-system/seed/service-store.yaml").write_text(SERVICE)
    report = run_gate(root, schema_dir=validators, display_root="out", kube_versions=VERSIONS)
    (finding,) = report.errors
    assert finding.kube_versions == ("1.29",)  # trafficDistribution arrived in 1.30
    assert finding.pointer == "/spec/trafficDistribution"
    assert [v.invalid for v in report.versions] == [1, 0, 0, 0, 0, 0]
    assert [v.valid for v in report.versions] == [11, 12, 12, 12, 12, 12]
