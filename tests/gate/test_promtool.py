"""promtool check rules / test rules and pint, on PrometheusRules shaped like standbyc's."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from compiler.validation import run_gate
from tests.conftest import OUT

FIXTURES = Path(__file__).parent / "fixtures"
SEED = "out/inference-system/seed"


def test_broken_promql_fails_check_rules_with_location(validators: Path) -> None:
    report = run_gate(FIXTURES / "broken" / "bad-promql", schema_dir=validators, display_root="out")
    assert not report.ok
    assert [(r.file, r.ok) for r in report.rule_checks] == [
        (f"{SEED}/prometheusrule-seed-egress.yaml", False)
    ]
    check = [f for f in report.errors if f.tool == "promtool-check"]
    assert [f.location() for f in check] == [
        f"{SEED}/prometheusrule-seed-egress.yaml: PrometheusRule/seed-egress: "
        "/spec/groups/0/rules/1/expr"
    ]
    assert check[0].message == (
        'rule "StandbyEgressHotOverLimit": could not parse expression: 1:24: parse error: '
        'unexpected "(" in grouping opts, expected "," or ")"'
    )
    # The CR itself is schema-valid; only promtool can see the PromQL error.
    assert all(v.ok for v in report.versions)


def test_pint_reports_the_same_broken_rule(validators: Path, need: Callable[..., None]) -> None:
    need("pint")
    report = run_gate(FIXTURES / "broken" / "bad-promql", schema_dir=validators, display_root="out")
    linted = [f for f in report.errors if f.tool == "pint"]
    assert [(f.pointer, f.message.split(";")[0]) for f in linted] == [
        (
            "/spec/groups/0/rules/1",
            "PromQL syntax error (promql/syntax) in StandbyEgressHotOverLimit",
        )
    ]
    # pint's own explanation, kept whole, on the same line, its Markdown links as text
    assert "(https://prometheus.io/docs/" in linted[0].message
    assert "for PromQL documentation" in linted[0].message
    assert "\n" not in linted[0].message and "](" not in linted[0].message


def test_threshold_off_by_8_fails_the_unit_test(validators: Path) -> None:
    """The alert compares a bytes/s rate with a bit/s limit; the test built for the right
    threshold (fires just above 1.25e9 B/s) must catch it."""
    report = run_gate(FIXTURES / "broken" / "off-by-8", schema_dir=validators, display_root="out")
    assert not report.ok
    assert all(v.ok for v in report.versions)
    assert all(r.ok for r in report.rule_checks)  # valid PromQL, wrong number
    assert [(t.file, t.ok) for t in report.rule_tests] == [
        (f"{SEED}/tests/StandbyEgressHotOverLimit.test.yaml", False)
    ]
    (failure,) = [f for f in report.errors if f.tool == "promtool-test"]
    assert failure.location() == (
        f"{SEED}/tests/StandbyEgressHotOverLimit.test.yaml: "
        "RuleTest/StandbyEgressHotOverLimit: /tests/0/alert_rule_test/1"
    )
    assert failure.message.splitlines()[0] == "alertname: StandbyEgressHotOverLimit, time: 7m,"
    assert "got:[]" in failure.message


def test_correct_threshold_passes_the_same_unit_test(validators: Path) -> None:
    report = run_gate(FIXTURES / "good", schema_dir=validators, display_root="out")
    assert [t.ok for t in report.rule_tests] == [True]


def test_unit_test_catches_a_shortened_for(validators: Path, tmp_path: Path) -> None:
    """'Fire after exactly its for': the test asserts silence at 6m, so for: 1m fails."""
    tree = tmp_path / "out"
    shutil.copytree(FIXTURES / "good", tree)
    seed = tree / "inference-system/seed"
    for rules in (seed / "tests/seed-egress.rules.yaml", seed / "prometheusrule-seed-egress.yaml"):
        rules.write_text(rules.read_text().replace("for: 2m", "for: 1m"))
    report = run_gate(tree, schema_dir=validators, display_root="out")
    (failure,) = report.errors
    assert failure.pointer == "/tests/0/alert_rule_test/0"
    assert failure.message.startswith("alertname: StandbyEgressHotOverLimit, time: 6m,")


def test_many_prometheusrules_one_promtool_call(validators: Path, tmp_path: Path) -> None:
    tree = tmp_path / "out"
    for i in range(5):
        shutil.copytree(FIXTURES / "good" / "inference-system", tree / f"ns{i}")
    report = run_gate(tree, schema_dir=validators, display_root="out")
    assert report.ok, report.summary_text()
    assert len(report.rule_checks) == 5 and len(report.rule_tests) == 5


def test_stale_rules_copy_under_tests_is_an_error(validators: Path, tmp_path: Path) -> None:
    """The unit tests load tests/<name>.rules.yaml; it must equal the PrometheusRule's groups."""
    tree = tmp_path / "out"
    shutil.copytree(FIXTURES / "good", tree)
    cr = tree / "inference-system/seed/prometheusrule-seed-egress.yaml"
    cr.write_text(cr.read_text().replace(") * 8 > 10000000000", ") > 10000000000"))
    report = run_gate(tree, schema_dir=validators, display_root="out")
    assert [f.render() for f in report.errors] == [
        f"{SEED}/tests/seed-egress.rules.yaml: PrometheusRule/seed-egress: /groups: differs from "
        f"spec.groups of {SEED}/prometheusrule-seed-egress.yaml; the unit tests would test a "
        "stale copy of the rules (recompile)"
    ]


def test_a_deployed_rule_without_a_tested_copy_is_an_error(
    validators: Path, tmp_path: Path
) -> None:
    """Each alert's tests load a copy of the group with that alert alone; an alert in the
    PrometheusRule that no copy holds would be deployed untested."""
    tree = tmp_path / "out"
    shutil.copytree(OUT, tree)
    spec_dir = tree / "inference-system/inference-engine"
    (spec_dir / "tests/standby-weights-behind.rules.yaml").unlink()
    (spec_dir / "tests/standby-weights-behind.test.yaml").unlink()
    report = run_gate(tree, schema_dir=validators, display_root="out")
    assert [f.render() for f in report.errors] == [
        "out/inference-system/inference-engine/prometheusrule-inference-engine-failover.yaml: "
        "PrometheusRule/inference-engine-failover: /spec/groups/0/rules/6: no copy under tests/ "
        "holds 'StandbyWeightsBehind': no unit test covers it (recompile)"
    ]


BAD_RULE = (
    FIXTURES / "broken" / "bad-promql" / "inference-system/seed/prometheusrule-seed-egress.yaml"
)


def _spelled(tmp_path: Path, text: str) -> Path:
    root = tmp_path / "tree"
    target = root / "inference-system/seed/prometheusrule-seed-egress.yaml"
    target.parent.mkdir(parents=True)
    target.write_text(text)
    return root


@pytest.mark.parametrize(
    "spelling",
    [
        # the kind written with an escape
        lambda t: t.replace("kind: PrometheusRule", 'kind: "Prometheus\\x52ule"'),
        # an alias: valid YAML, which Kubernetes and kubeconform read
        lambda t: (
            t.replace("      rules:\n", "      rules: &r\n")
            + "    - name: again\n      rules: *r\n"
        ),
        # a duplicate key, which PyYAML reads as the last one
        lambda t: t.replace(
            "  namespace: inference-system\n", "  namespace: x\n  namespace: inference-system\n"
        ),
    ],
    ids=["escaped-kind", "alias", "duplicate-key"],
)
def test_a_prometheusrule_however_spelled_is_checked_by_promtool(
    spelling: Callable[[str], str], tmp_path: Path, validators: Path
) -> None:
    """The kind is found by parsing, never by a pattern: promtool sees the rule."""
    root = _spelled(tmp_path, spelling(BAD_RULE.read_text()))
    report = run_gate(root, schema_dir=validators, display_root="out")
    assert not report.ok
    check = [f for f in report.errors if f.tool == "promtool-check"]
    assert check and all("could not parse expression" in f.message for f in check), check


def test_a_manifest_no_reader_can_parse_is_an_error(tmp_path: Path, validators: Path) -> None:
    root = _spelled(tmp_path, "kind: [PrometheusRule\n")
    report = run_gate(root, schema_dir=validators, display_root="out")
    assert not report.ok
    assert any(
        f.tool == "standbyc" and "cannot be read to find PrometheusRules" in f.message
        for f in report.errors
    )
