"""The oldest prometheus-operator standbyc supports: v0.66.0, the first whose PrometheusRule
CRD has ``keep_firing_for``, which the bandwidth alerts set. Every PrometheusRule standbyc
emits (the example specs' and every golden case's) passes the real kubeconform ``-strict``
against that release's CRD; the release before it, v0.65.2, refuses each one on
``keep_firing_for`` and on nothing else. Both CRDs are pinned (pins.json ``test_crds``) and
fetched by ``make test``'s setup."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from compiler import tools, yamlio
from compiler.gate import pins as pinfile
from compiler.gate import schemas
from tests.conftest import CASES, OUT

RULES = sorted(OUT.glob("*/*/prometheusrule-*.yaml")) + sorted(
    CASES.glob("*/expected/*/*/prometheusrule-*.yaml")
)
OLDEST = "oldest"
TOO_OLD = "too_old"


def _schema_dir(role: str, tmp_path: Path) -> Path:
    source = pinfile.load().test_crds[role]
    dest = tmp_path / role
    written = schemas.build_crds(dest, [source], allow_network=False)
    assert written, source.label
    return dest


def _kubeconform(schema_dir: Path, files: list[Path]) -> list[dict[str, Any]]:
    args = ["-strict", "-summary", "-output", "json", "-schema-location",
            f"{schema_dir}/{{{{.ResourceKind}}}}{{{{.KindSuffix}}}}.json"]  # fmt: skip
    result = tools.run("kubeconform", [*args, *map(str, files)], ok_codes=(0, 1))
    doc = json.loads(result.stdout)
    assert doc["summary"]["skipped"] == 0 and doc["summary"]["errors"] == 0, doc
    resources: list[dict[str, Any]] = doc.get("resources", [])
    return [r for r in resources if r["status"] != "statusValid"]


def test_every_emitted_rule_sets_keep_firing_for() -> None:
    """Without it the floor would be lower, and the test below would prove nothing."""
    assert len(RULES) >= 5, RULES
    for path in RULES:
        text = path.read_text()
        assert "keep_firing_for:" in text, path


def test_the_oldest_supported_operator_accepts_every_emitted_rule(tmp_path: Path) -> None:
    assert _kubeconform(_schema_dir(OLDEST, tmp_path), RULES) == []


def test_the_release_before_refuses_them_on_keep_firing_for_alone(tmp_path: Path) -> None:
    schema_dir = _schema_dir(TOO_OLD, tmp_path)
    refused = _kubeconform(schema_dir, RULES)
    assert sorted(r["filename"] for r in refused) == sorted(map(str, RULES))
    for resource in refused:
        assert re.search(r"additional properties 'keep_firing_for' not allowed", resource["msg"]), (
            resource
        )
    # Without keep_firing_for, the same rules pass: it is the only thing v0.65.2 lacks.
    stripped = tmp_path / "stripped"
    stripped.mkdir()
    for i, path in enumerate(RULES):
        obj = yaml.safe_load(path.read_text())
        for group in obj["spec"]["groups"]:
            for rule in group["rules"]:
                rule.pop("keep_firing_for", None)
        (stripped / f"{i}.yaml").write_text(yamlio.dump(obj))
    assert _kubeconform(schema_dir, sorted(stripped.iterdir())) == []


@pytest.mark.parametrize("role", [OLDEST, TOO_OLD])
def test_the_pins_are_the_releases_they_say(role: str) -> None:
    source = pinfile.load().test_crds[role]
    assert source.kinds == ("PrometheusRule",)
    assert source.version == {OLDEST: "v0.66.0", TOO_OLD: "v0.65.2"}[role]
