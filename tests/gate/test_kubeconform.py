"""kubeconform over emitted objects: each broken variant fails at its exact location."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from compiler.cli import main
from compiler.gate import DEFAULT_KUBE_VERSIONS
from compiler.validation import run_gate

FIXTURES = Path(__file__).parent / "fixtures"

SEED = "out/inference-system/seed"


def _errors(case: str, schema_dir: Path) -> list[str]:
    report = run_gate(FIXTURES / "broken" / case, schema_dir=schema_dir, display_root="out")
    assert not report.ok
    return [f.render(report.kube_versions) for f in report.errors]


def test_good_tree_is_valid_on_every_version(validators: Path) -> None:
    report = run_gate(FIXTURES / "good", schema_dir=validators, display_root="out")
    assert report.ok, report.summary_text()
    assert [v.kube_version for v in report.versions] == list(DEFAULT_KUBE_VERSIONS)
    assert all(v.valid == 11 and v.invalid == 0 for v in report.versions)
    assert [(t.file, t.ok) for t in report.rule_tests] == [
        (f"{SEED}/tests/StandbyEgressHotOverLimit.test.yaml", True)
    ]


def test_unknown_field(validators: Path) -> None:
    assert _errors("unknown-field", validators) == [
        f"{SEED}/deployment-llm-hot.yaml: Deployment/llm-hot: "
        "/spec/template/spec/containers/0/bogusField: unknown field 'bogusField'"
    ]


def test_unknown_field_in_our_crd(validators: Path) -> None:
    """Strict additionalProperties: false from the CRD converter catches a typo."""
    assert _errors("crd-unknown-field", validators) == [
        f"{SEED}/ciliumegressqos-seed.yaml: CiliumEgressQoS/seed: "
        "/spec/selectors/0/bandwidth: missing required field 'bandwidth'",
        f"{SEED}/ciliumegressqos-seed.yaml: CiliumEgressQoS/seed: "
        "/spec/selectors/0/bandwith: unknown field 'bandwith'",
    ]


def test_wrong_type(validators: Path) -> None:
    assert _errors("wrong-type", validators) == [
        f"{SEED}/deployment-llm-hot.yaml: Deployment/llm-hot: /spec/replicas: "
        "got string, want null or integer"
    ]


def test_missing_required_field(validators: Path) -> None:
    assert _errors("missing-required", validators) == [
        f"{SEED}/job-seed-weight-sync.yaml: Job/seed-weight-sync: "
        "/spec/template/spec/containers/0/name: missing required field 'name'"
    ]


def test_kind_without_schema_is_an_error_not_a_skip(validators: Path) -> None:
    report = run_gate(FIXTURES / "broken" / "no-schema", schema_dir=validators, display_root="out")
    assert [f.render(report.kube_versions) for f in report.errors] == [
        f"{SEED}/virtualservice-seed-llm.yaml: VirtualService/seed-llm: "
        "no schema: could not find schema for VirtualService (every emitted kind needs a schema)"
    ]
    assert all(v.errors == 1 and v.skipped == 0 for v in report.versions)


def test_one_finding_per_problem_across_the_matrix(validators: Path) -> None:
    report = run_gate(FIXTURES / "broken" / "wrong-type", schema_dir=validators, display_root="out")
    (finding,) = report.errors
    assert finding.kube_versions == DEFAULT_KUBE_VERSIONS
    assert [v.invalid for v in report.versions] == [1] * len(DEFAULT_KUBE_VERSIONS)


def test_cli_exit_code_and_output(validators: Path, capsys: pytest.CaptureFixture[str]) -> None:
    broken = FIXTURES / "broken" / "wrong-type"
    code = main(
        ["validate", str(broken), "--kube-version", "1.31", "--schema-dir", str(validators)]
    )
    assert code == 1
    err = capsys.readouterr().err
    assert (
        f"{broken}/inference-system/seed/deployment-llm-hot.yaml: Deployment/llm-hot: "
        "/spec/replicas: got string, want null or integer\n"
    ) in err
    assert "FAILED: 1 errors" in err


def test_cli_json(validators: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = main(
        ["validate", str(FIXTURES / "good"), "--format", "json", "--schema-dir", str(validators)]
    )
    data = json.loads(capsys.readouterr().out)
    assert code == 0
    assert data["ok"] is True
    assert data["kube_versions"] == list(DEFAULT_KUBE_VERSIONS)


def test_changed_limits_the_run_to_that_spec(
    validators: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """pre-commit with filenames: only the changed spec's directory is validated."""
    out = tmp_path / "out"
    shutil.copytree(FIXTURES / "good" / "inference-system", out / "ok-ns")
    shutil.copytree(FIXTURES / "broken" / "wrong-type" / "inference-system", out / "bad-ns")
    changed = str(out / "ok-ns" / "seed" / "tests" / "StandbyEgressHotOverLimit.test.yaml")
    argv = ["validate", str(out), "--schema-dir", str(validators), "--kube-version", "1.31"]
    assert main([*argv, "--changed", changed]) == 0
    assert "validated" in capsys.readouterr().out
    assert main([*argv, "--changed", str(out / "bad-ns" / "seed" / "deployment-llm-hot.yaml")]) == 1
