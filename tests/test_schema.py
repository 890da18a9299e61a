"""The JSON Schema editors see agrees with what the compiler accepts."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from ruamel.yaml import YAML

from compiler.spec import json_schema
from tests.conftest import CASES, REPO, run_cli

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
