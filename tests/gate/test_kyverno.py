"""The generated ``kyverno test`` of each ClusterPolicy, run by the gate with the real Kyverno
CLI: it passes on what standbyc emits, and fails, located, on a policy that mutates the wrong
Pods or writes the wrong annotation."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from compiler.gate import kyverno
from compiler.validation import run_gate
from tests.conftest import OUT

SPEC_DIR = "inference-system/inference-engine"
POLICY = f"{SPEC_DIR}/clusterpolicy-standbyc-inference-system.inference-engine-egress.yaml"
TEST = f"{SPEC_DIR}/tests/kyverno/kyverno-test.yaml"


@pytest.fixture
def tree(tmp_path: Path, need: Callable[..., None]) -> Path:
    need(kyverno.TOOL)
    root = tmp_path / "out"
    shutil.copytree(OUT, root)
    return root


def test_every_emitted_policy_passes_its_kyverno_test(tree: Path, validators: Path) -> None:
    report = run_gate(tree, schema_dir=validators, display_root="out")
    assert report.ok, report.summary_text()
    assert report.kyverno == "ran"
    assert sorted(t.file for t in report.policy_tests) == sorted(
        f"out/{p.relative_to(OUT).as_posix()}"
        for p in OUT.glob("*/*/tests/kyverno/kyverno-test.yaml")
    )
    assert all(t.ok for t in report.policy_tests)
    assert "kyverno test: 2/2 policy tests passed" in report.summary_text()


@pytest.mark.parametrize(
    ("change", "resource"),
    [
        # every namespace: the same Pod in another namespace is mutated
        (
            ("namespaces:\n                - inference-system\n", ""),
            "v1/Pod/standbyc-test-other/standby-hot-other-namespace",
        ),
        # the wrong rate for the hot tier
        ("kubernetes.io/egress-bandwidth: 25G", "v1/Pod/inference-system/standby-hot-0"),
        # no tier in the selector: the primary and the other tiers are mutated as hot
        (("                  tier: hot\n", ""), "v1/Pod/inference-system/primary-0"),
    ],
    ids=["any-namespace", "wrong-rate", "no-tier-selector"],
)
def test_a_wrong_policy_fails_its_kyverno_test(
    tree: Path, validators: Path, change: tuple[str, str] | str, resource: str
) -> None:
    policy = tree / POLICY
    text = policy.read_text()
    old, new = change if isinstance(change, tuple) else (change, change.replace("25G", "10G"))
    assert old in text
    policy.write_text(text.replace(old, new, 1))
    report = run_gate(tree, schema_dir=validators, display_root="out", only=[POLICY])
    assert not report.ok
    assert [(t.file, t.ok) for t in report.policy_tests] == [(f"out/{TEST}", False)]
    failures = [f for f in report.errors if f.tool == "kyverno"]
    assert failures and all(f.file == f"out/{TEST}" for f in failures)
    assert any(f.message.startswith(f"{resource}: Fail") for f in failures), failures
    policy = "ClusterPolicy/standbyc-inference-system.inference-engine-egress"
    assert failures[0].location().startswith(f"out/{TEST}: {policy}: rule egress-")


def test_a_policy_that_matches_no_pod_fails_its_kyverno_test(tree: Path, validators: Path) -> None:
    """The CLI reports a resource no rule matched as Pass (reason Excluded), even where the
    test expects a patch: the gate still fails each tier's Pod that was not mutated."""
    policy = tree / POLICY
    text = policy.read_text()
    assert text.count("- inference-system\n") == 3
    policy.write_text(text.replace("- inference-system\n", "- inference-system-typo\n"))
    report = run_gate(tree, schema_dir=validators, display_root="out", only=[POLICY])
    assert not report.ok
    messages = sorted(f.message for f in report.errors if f.tool == "kyverno")
    assert messages == [
        f"Pod/standby-{tier}-0: Not applied (the rule did not match it; kyverno reports "
        "that as Pass (Excluded))"
        for tier in ("cold", "hot", "warm")
    ]


def test_the_report_says_when_the_policy_tests_were_not_run(
    tree: Path, validators: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_find = kyverno.tools.find
    monkeypatch.setattr(
        kyverno.tools, "find", lambda n: None if n == kyverno.TOOL else real_find(n)
    )
    report = run_gate(tree, schema_dir=validators, display_root="out")
    assert report.ok
    assert report.policy_tests == ()
    assert report.kyverno.startswith("not installed, 2 policy tests not run (install: standbyc")
