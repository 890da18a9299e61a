"""The JSON Schema editors see agrees with what the compiler accepts."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from ruamel.yaml import YAML

from compiler.admit import json_schema
from tests.conftest import CASES, REPO, run_cli, tree

SPECS = sorted(REPO.glob("specs/*.yaml")) + sorted(CASES.glob("*/spec.yaml"))


def test_committed_schema_is_current() -> None:
    committed = json.loads((REPO / "schema" / "standbyspec.schema.json").read_text())
    assert committed == json_schema(), "run: make schema"


def test_schema_command_prints_the_schema() -> None:
    result = run_cli("schema")
    assert result.code == 0
    assert json.loads(result.out) == json_schema()


@pytest.mark.parametrize("spec", SPECS, ids=lambda p: p.relative_to(REPO).as_posix())
def test_spec_validates_against_exported_schema(spec: Path) -> None:
    data = YAML(typ="safe").load(spec.read_text())
    jsonschema.validate(data, json_schema(), cls=jsonschema.Draft202012Validator)


@pytest.mark.parametrize(
    ("path", "value"),
    [
        (("spec", "tiers", "hot", "egress"), "25Gbs"),
        (("spec", "tiers", "hot", "egres"), "25Gbit/s"),
        (("spec", "tiers", "hot", "replicas"), -1),
        (("spec", "model", "size"), "14Gb"),
        (("metadata", "name"), "Bad_Name"),
        (("spec", "weightSync", "trigger"), {"type": "schedule"}),
    ],
)
def test_schema_and_compiler_both_refuse(
    path: tuple[str, ...], value: object, tmp_path: Path
) -> None:
    data = YAML(typ="safe").load((REPO / "specs" / "inference-engine.yaml").read_text())
    node = data
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = value
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(data, json_schema(), cls=jsonschema.Draft202012Validator)
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps(data))
    result = run_cli("compile", str(spec), "--out", str(tmp_path / "out"), "--no-validate")
    assert result.code == 2


def _defaults(schema: dict[str, Any], node: dict[str, Any], path: tuple[str, ...]) -> list[Any]:
    """(path, default, subschema) for every property with a default, through $refs."""
    if "$ref" in node:
        node = schema["$defs"][node["$ref"].rsplit("/", 1)[1]]
    found: list[Any] = []
    for name, prop in node.get("properties", {}).items():
        if "default" in prop:
            found.append(((*path, name), prop["default"], prop))
        if "default" in prop and prop["default"] is None:
            continue  # an object the spec may leave out (tiers.hot.reload): its own defaults
            # are reached where it is not optional (engine.reload)
        for branch in [prop, *prop.get("anyOf", [])]:
            if "$ref" in branch or "properties" in branch:
                found += _defaults(schema, branch, (*path, name))
    return found


DEFAULTS = _defaults(json_schema(), json_schema(), ())


def test_there_are_defaults_to_check() -> None:
    assert len(DEFAULTS) > 60


@pytest.mark.parametrize(("path", "default", "subschema"), DEFAULTS, ids=lambda v: "")
def test_every_default_is_valid_against_its_own_schema(
    path: tuple[str, ...], default: Any, subschema: dict[str, Any]
) -> None:
    schema = {**{k: v for k, v in subschema.items() if k != "default"},
              "$defs": json_schema()["$defs"]}  # fmt: skip
    jsonschema.validate(default, schema, cls=jsonschema.Draft202012Validator)


def test_a_spec_that_writes_out_every_default_compiles_to_the_same_tree(tmp_path: Path) -> None:
    full: dict[str, Any] = {"apiVersion": "standbyc.dev/v1alpha1", "kind": "StandbySpec",
                            "metadata": {"name": "minimal"}}  # fmt: skip
    for path, default, _ in DEFAULTS:
        if path[0] not in ("metadata", "spec") or default is None:
            continue
        node = full
        for key in path[:-1]:
            node = node.setdefault(key, {})
        if not isinstance(node, dict):
            continue
        node.setdefault(path[-1], default)
    jsonschema.validate(full, json_schema(), cls=jsonschema.Draft202012Validator)
    for name, text in (("explicit", json.dumps(full)), ("minimal", "apiVersion: standbyc.dev/"
                       "v1alpha1\nkind: StandbySpec\nmetadata: {name: minimal}\n")):  # fmt: skip
        (tmp_path / name).mkdir()
        (tmp_path / name / "spec.yaml").write_text(text)
        result = run_cli("compile", str(tmp_path / name / "spec.yaml"),
                         "--out", str(tmp_path / name / "out"), "--no-validate")  # fmt: skip
        assert result.code == 0, result.err
    explicit, minimal = tree(tmp_path / "explicit" / "out"), tree(tmp_path / "minimal" / "out")
    # PLAN.md says of each number whether the spec declares it: there alone, written
    # defaults read "declared" where left-out ones read "default", with the same values.
    plan = "default/minimal/PLAN.md"
    assert _unlabelled(explicit.pop(plan)) == _unlabelled(minimal.pop(plan))
    assert explicit == minimal


LABEL = re.compile(
    rb"(\((declared|default): ([^()]|\([^()]*\))*\))|(\| (declared|default): [^|]*\|)"
)


def _unlabelled(doc: bytes) -> bytes:
    return LABEL.sub(b"", doc)
