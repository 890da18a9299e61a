"""``--format junit``: one JUnit XML document on stdout whatever the outcome, for CI test
reports; spec problems located as file:line:column, validator findings by JSON pointer
under a suite per validator (the real tools run in the end-to-end test)."""

from __future__ import annotations

import io
import shutil
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compiler.output import junit_writer
from tests.conftest import OUT, run_cli

SPEC = "inference-system/inference-engine"
BAD = Path(__file__).resolve().parents[1] / "bad"


@dataclass(frozen=True)
class _Outcome:
    doc: dict[str, Any] = field(default_factory=dict)
    exit_code: int = 0
    said: str = ""
    trouble: str = ""

    def to_json(self) -> dict[str, Any]:
        return self.doc

    def text(self) -> str:
        return self.said

    def problem(self) -> str:
        return self.trouble


def _suites(outcome: _Outcome) -> dict[str, ET.Element]:
    out = io.StringIO()
    junit_writer.write(outcome, out, io.StringIO())
    root = ET.fromstring(out.getvalue())
    assert root.tag == "testsuites"
    suites = {s.get("name", ""): s for s in root.findall("testsuite")}
    # the totals agree with the cases
    cases = root.findall("testsuite/testcase")
    assert root.get("tests") == str(len(cases))
    assert root.get("failures") == str(sum(1 for c in cases if c.find("failure") is not None))
    return suites


def _failures(suite: ET.Element) -> dict[str, list[str]]:
    return {
        c.get("name", ""): [f.text or "" for f in c.findall("failure")]
        for c in suite.findall("testcase")
    }


def test_spec_problems_are_failures_located_by_line_and_column() -> None:
    doc = {
        "specs": [{"source": "specs/good.yaml"}],
        "diagnostics": [
            {
                "file": "specs/bad.yaml",
                "line": 9,
                "column": 17,
                "path": "spec.weightSync.trigger.schedule",
                "message": "'61' is not a minute",
            },
        ],
        "warnings": ["specs/good.yaml:2:1: metadata.namespace is not set"],
    }
    suites = _suites(_Outcome(doc, exit_code=2))
    assert list(suites) == ["spec"]
    assert _failures(suites["spec"]) == {
        "specs/good.yaml": [],
        "specs/bad.yaml": [
            "specs/bad.yaml:9:17: spec.weightSync.trigger.schedule: '61' is not a minute"
        ],
    }
    assert "metadata.namespace is not set" in (suites["spec"].findtext("system-out") or "")


def test_validator_findings_fall_under_their_validator() -> None:
    report = {
        "versions": [{"kube_version": "1.30"}, {"kube_version": "1.31"}],
        "rule_checks": [{"file": "out/a/prometheusrule-a.yaml", "ok": True}],
        "rule_tests": [
            {"file": "out/a/tests/x.test.yaml", "ok": False},
            {"file": "out/a/tests/y.test.yaml", "ok": True},
        ],
        "policy_tests": [],
        "pint": "ran offline on 1 PrometheusRules",
        "findings": [
            {
                "file": "out/a/cm.yaml",
                "kind": "ConfigMap",
                "name": "a",
                "pointer": "/data",
                "message": "got array",
                "tool": "kubeconform",
                "severity": "error",
                "kube_versions": ["1.31"],
            },
            {
                "file": "out/a/tests/x.test.yaml",
                "kind": "RuleTest",
                "name": "X",
                "pointer": "/tests/0/alert_rule_test/1",
                "message": "expected 1 alert\nfound 0",
                "tool": "promtool-test",
                "severity": "error",
                "kube_versions": [],
            },
        ],
    }
    suites = _suites(_Outcome({"diagnostics": [], "validation": report}, exit_code=1))
    assert _failures(suites["kubeconform"]) == {
        "kubernetes 1.30": [],
        "kubernetes 1.31": ["out/a/cm.yaml: ConfigMap/a: /data: got array"],
    }
    assert _failures(suites["promtool test rules"]) == {
        "out/a/tests/x.test.yaml": [
            "out/a/tests/x.test.yaml: RuleTest/X: /tests/0/alert_rule_test/1: "
            "expected 1 alert\nfound 0"
        ],
        "out/a/tests/y.test.yaml": [],
    }
    assert _failures(suites["promtool check rules"]) == {"out/a/prometheusrule-a.yaml": []}
    assert _failures(suites["pint"]) == {"out/a/prometheusrule-a.yaml": []}
    failure = suites["promtool test rules"].find("testcase/failure")
    assert failure is not None and failure.get("message") == "expected 1 alert"


def test_a_failure_no_check_names_is_a_failed_case() -> None:
    stale = _Outcome({"diagnostics": [], "stale": ["out/x.yaml"]}, 1, "", "out/ is stale")
    assert _failures(_suites(stale)["standbyc"]) == {"standbyc": ["out/ is stale"]}
    fine = _Outcome({"fresh": True}, 0, "out/ is up to date\n")
    assert _failures(_suites(fine)["standbyc"]) == {"out/ is up to date": []}


def test_validate_junit_end_to_end(validators: Path, tmp_path: Path) -> None:
    """The real validators over a tree with a wrong threshold in a rule under test and a
    kind no schema knows: both fail in the report, and the document is the only stdout."""
    tree = tmp_path / "out"
    shutil.copytree(OUT, tree)
    rules = tree / SPEC / "tests/inference-bandwidth-high.rules.yaml"
    rules.write_text(rules.read_text().replace(") * 8 > 21250000000", ") > 21250000000"))
    cm = tree / SPEC / "configmap-inference-engine-connection-pool.yaml"
    cm.write_text(cm.read_text().replace("kind: ConfigMap", "kind: ConfigMapx"))
    result = run_cli(
        "validate", str(tree), "--format", "junit", "--kube-version", "1.31",
        "--schema-dir", str(validators),
    )  # fmt: skip
    assert result.code == 1, result.err
    suites = {s.get("name"): s for s in ET.fromstring(result.out).findall("testsuite")}
    (kube,) = _failures(suites["kubeconform"]).values()
    assert len(kube) == 1 and "ConfigMapx" in kube[0]
    failed = {n for n, f in _failures(suites["promtool test rules"]).items() if f}
    assert failed == {f"{tree}/{SPEC}/tests/inference-bandwidth-high.test.yaml"}
    # one test case per promtool test file of the two specs
    assert (
        len(suites["promtool test rules"].findall("testcase"))
        == len(list(tree.glob("*/*/tests/*.test.yaml")))
        == 19
    )


def test_errors_are_junit_too(tmp_path: Path) -> None:
    """A missing file and a broken spec: exit 2, and the XML is still the only stdout."""
    missing = run_cli("compile", str(tmp_path / "nope.yaml"), "--format", "junit")
    assert missing.code == 2
    (failure,) = ET.fromstring(missing.out).iter("failure")
    assert failure.get("message") == f"{tmp_path / 'nope.yaml'}: no such file or directory"
    bad = run_cli("compile", str(BAD / "bad-cron.yaml"), "--no-validate", "--format", "junit")
    assert bad.code == 2
    (case,) = ET.fromstring(bad.out).iter("testcase")
    (text,) = [f.text or "" for f in case.iter("failure")]
    assert text.endswith(
        "bad-cron.yaml:9:17: spec.weightSync.trigger.schedule: '61' is not a minute (0-59)"
    )
