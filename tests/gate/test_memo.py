"""Validator passes remembered by content: a second run over the same bytes with the same
tools runs no tool and reports the same; a changed byte, a failure or a rebuilt tool runs
again."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compiler import tools
from compiler.gate import DEFAULT_KUBE_VERSIONS, Report
from compiler.reuse import identity, store
from compiler.validation import run_gate
from tests.conftest import OUT
from tests.gate.test_differential import verdicts

SPEC = "inference-system/inference-engine"


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STANDBYC_CACHE", "on")
    monkeypatch.setenv("STANDBYC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    shutil.copytree(OUT, tmp_path / "out")
    return tmp_path / "out"


def _ran(report: object) -> dict[str, float]:
    seconds: dict[str, float] = report.tool_seconds  # type: ignore[attr-defined]
    return {tool: s for tool, s in seconds.items() if s > 0}


def test_a_second_run_over_the_same_bytes_runs_no_tool(
    tree: Path, cache_dir: Path, validators: Path
) -> None:
    first = run_gate(tree, schema_dir=validators, display_root="out")
    assert first.ok and first.reused == 0
    assert {"kubeconform", "promtool"} <= set(_ran(first))
    second = run_gate(tree, schema_dir=validators, display_root="out")
    assert second.ok
    assert _ran(second) == {}
    assert second.reused > 0
    assert second.versions == first.versions  # the same counts of valid resources
    assert second.rule_checks == first.rule_checks
    assert [(r.file, r.ok) for r in second.rule_tests] == [(r.file, r.ok) for r in first.rule_tests]
    assert [(r.file, r.ok) for r in second.policy_tests] == [
        (r.file, r.ok) for r in first.policy_tests
    ]
    assert "passes reused (from the cache" in second.summary_text()


def test_a_changed_byte_runs_again_and_failures_are_never_remembered(
    tree: Path, cache_dir: Path, validators: Path
) -> None:
    assert run_gate(tree, schema_dir=validators, display_root="out").ok
    rules = tree / SPEC / "tests/inference-bandwidth-high.rules.yaml"
    rules.write_text(rules.read_text().replace(") * 8 > 21250000000", ") > 21250000000"))
    for _ in range(2):
        report = run_gate(tree, schema_dir=validators, display_root="out")
        assert not report.ok
        assert "promtool" in _ran(report)
        failed = [r.file for r in report.rule_tests if not r.ok]
        assert failed == [f"out/{SPEC}/tests/inference-bandwidth-high.test.yaml"]


def test_a_changed_rule_is_read_again_and_its_stale_copies_are_reported(
    tree: Path, cache_dir: Path, validators: Path
) -> None:
    """The parsed PrometheusRule and the agreement of its copies under tests/ are
    remembered by their bytes: a rule edited by hand after a remembered pass is read anew,
    and every copy is then reported stale, on every run."""
    assert run_gate(tree, schema_dir=validators, display_root="out").ok
    rule = tree / SPEC / "prometheusrule-inference-engine-failover.yaml"
    rule.write_text(rule.read_text().replace(") * 8 > 21250000000", ") * 8 > 42500000000"))
    for _ in range(2):
        report = run_gate(tree, schema_dir=validators, display_root="out")
        assert not report.ok
        stale = [f for f in report.findings if "would test a stale copy" in f.message]
        assert [f.file for f in stale] == [
            f"out/{SPEC}/tests/inference-bandwidth-high.rules.yaml"
        ], report.summary_text()


def test_two_rules_in_one_file_are_checked_against_their_copies_apart(
    tree: Path, cache_dir: Path, validators: Path
) -> None:
    """A second PrometheusRule in the same file, whose copy under tests/ is stale: the
    first one's remembered agreement must not stand for it."""
    rule = tree / SPEC / "prometheusrule-inference-engine-failover.yaml"
    text = rule.read_text()
    group = "standbyc.inference-system.inference-engine"
    second = text.split("\n", 1)[1].replace(group, f"{group}-b")
    second = second.replace("name: inference-engine-failover", "name: inference-engine-b")
    rule.write_text(f"{text}---\n{second}")
    copy = tree / SPEC / "tests/inference-bandwidth-high.rules.yaml"
    stale = copy.read_text().replace(group, f"{group}-b").replace(") * 8 > 2", ") * 8 > 3")
    (tree / SPEC / "tests/b.rules.yaml").write_text(stale)
    for _ in range(2):
        report = run_gate(tree, schema_dir=validators, display_root="out")
        stale_found = [f.file for f in report.findings if "would test a stale copy" in f.message]
        assert stale_found == [f"out/{SPEC}/tests/b.rules.yaml"], report.summary_text()


def test_another_standbyc_runs_again(
    tree: Path, cache_dir: Path, validators: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """standbyc's own code decides what is checked: an upgraded one finds no old pass."""
    assert run_gate(tree, schema_dir=validators, display_root="out").ok
    monkeypatch.setattr(store, "code_digest", lambda: "another standbyc")
    again = run_gate(tree, schema_dir=validators, display_root="out")
    assert again.ok and again.reused == 0
    assert {"kubeconform", "promtool"} <= set(_ran(again))


def test_a_rebuilt_tool_runs_again(
    tree: Path, cache_dir: Path, validators: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run_gate(tree, schema_dir=validators, display_root="out").ok
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    promtool = tools.find("promtool")
    assert promtool is not None
    shutil.copy2(promtool, bin_dir / "promtool")
    (bin_dir / "promtool").touch()  # the same program, rebuilt: another tool to the cache
    monkeypatch.setenv("STANDBYC_TOOLS_DIR", str(bin_dir))
    report = run_gate(tree, schema_dir=validators, display_root="out")
    assert report.ok
    assert "promtool" in _ran(report) and "kubeconform" not in _ran(report)


def test_a_unit_test_seen_before_is_found_by_its_bytes(
    tree: Path, cache_dir: Path, validators: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The second run looks a promtool test up by its exact bytes first, so it does not
    abstract the spec's names out of it again (that costs more than the lookup)."""
    assert run_gate(tree, schema_dir=validators, display_root="out").ok
    abstracted: list[str] = []
    real = identity.abstract

    def spy(rel: str, texts: Any, **kw: Any) -> Any:
        abstracted.append(rel)
        return real(rel, texts, **kw)

    monkeypatch.setattr(identity, "abstract", spy)
    again = run_gate(tree, schema_dir=validators, display_root="elsewhere")  # no tree hit
    assert again.ok and again.reused > 0
    assert not [rel for rel in abstracted if rel.endswith(".test.yaml")]


def test_a_schema_changed_in_place_is_another_schema_set(
    tree: Path, cache_dir: Path, validators: Path, tmp_path: Path
) -> None:
    """A pass is keyed on the bytes of the schemas, not on where they are or what the
    build recorded: a schema edited in place (its time set back) is validated against."""
    schemas = tmp_path / "schemas"
    shutil.copytree(validators, schemas, symlinks=True)
    assert run_gate(tree, schema_dir=schemas, display_root="out").ok
    for version in DEFAULT_KUBE_VERSIONS:
        path = schemas / "kubernetes" / f"v{version}.0" / "configmap-v1.json"
        st = path.stat()
        schema = json.loads(path.read_text())
        schema["required"] = ["immutableSince"]  # a field no ConfigMap has
        path.write_text(json.dumps(schema))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    cached = run_gate(tree, schema_dir=schemas, display_root="out")
    plain = _without_reuse(lambda: run_gate(tree, schema_dir=schemas, display_root="out"))
    assert not plain.ok
    assert not cached.ok
    assert verdicts(cached) == verdicts(plain)


def _without_reuse(run: Callable[[], Report]) -> Report:
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("STANDBYC_REUSE", "off")
        return run()
