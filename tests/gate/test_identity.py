"""Unit tests that differ only in their spec's name and namespace share one run of the real
promtool and kyverno; a shared run that fails runs each of them again, so every file gets its
own messages; and a test where a value holding a name is read beyond equality is never
shared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from compiler.api import compile_tree
from compiler.gate import identity, kyverno, promtool, run_gate
from tests.conftest import REPO

SPEC = (REPO / "specs" / "inference-engine.yaml").read_text()
HEADER = b"# standbyc: generated \xe2\x80\x94 do not edit. Source: specs/x.yaml\n"


def _specs(tmp_path: Path, *names: tuple[str, str]) -> Path:
    """The example spec under each (namespace, name), compiled without validation."""
    paths = []
    for namespace, name in names:
        path = tmp_path / "specs" / f"{name}.yaml"
        path.parent.mkdir(exist_ok=True)
        path.write_text(
            SPEC.replace("name: inference-engine", f"name: {name}").replace(
                "namespace: inference-system", f"namespace: {namespace}"
            )
        )
        paths.append(path)
    out = tmp_path / "out"
    assert compile_tree(paths, out, validate=False).ok
    return out


@pytest.fixture
def spied(monkeypatch: pytest.MonkeyPatch) -> dict[str, list[str]]:
    """The files each tool was really run on (the real tools still run)."""
    ran: dict[str, list[str]] = {"promtool": [], "kyverno": []}
    real_test, real_policy = promtool.test_rules, kyverno.run

    def test_rules(files: list[str], **kw: Any) -> promtool.Outcome:
        ran["promtool"] += files
        return real_test(files, **kw)

    def policy_run(dirs: list[str], **kw: Any) -> promtool.Outcome:
        ran["kyverno"] += dirs
        return real_policy(dirs, **kw)

    monkeypatch.setattr(promtool, "test_rules", test_rules)
    monkeypatch.setattr(kyverno, "run", policy_run)
    return ran


def test_two_specs_that_differ_only_in_names_share_every_unit_test_run(
    tmp_path: Path, validators: Path, spied: dict[str, list[str]], need: Any
) -> None:
    need(kyverno.TOOL)
    out = _specs(tmp_path, ("team-a", "engine-a"), ("team-b", "engine-b"))
    report = run_gate(out, schema_dir=validators, display_root="out")
    assert report.ok, report.summary_text()
    files = {r.file for r in report.rule_tests}
    assert len(files) == 18 and all(r.ok for r in report.rule_tests)
    # The generation is in WeightSyncJobFailed's text and the record's, the same for both:
    # all 9 shared.
    assert sorted(spied["promtool"]) == sorted(
        f for f in (p.removeprefix("out/") for p in files) if f.startswith("team-a/")
    )
    assert spied["kyverno"] == ["team-a/engine-a/tests/kyverno"]
    assert {t.file for t in report.policy_tests} == {
        f"out/team-{x}/engine-{x}/tests/kyverno/kyverno-test.yaml" for x in "ab"
    }
    assert report.reused == 9 + 1


def test_a_shared_run_that_fails_runs_each_test_on_its_own(
    tmp_path: Path, validators: Path, spied: dict[str, list[str]]
) -> None:
    out = _specs(tmp_path, ("team-a", "engine-a"), ("team-b", "engine-b"))
    for x in "ab":  # the same wrong expectation in both: still one shape
        test = out / f"team-{x}/engine-{x}/tests/inference-bandwidth-high.test.yaml"
        test.write_text(test.read_text().replace("severity: warning", "severity: info"))
    report = run_gate(out, schema_dir=validators, display_root="out")
    assert not report.ok
    failed = sorted(r.file for r in report.rule_tests if not r.ok)
    assert failed == [
        f"out/team-{x}/engine-{x}/tests/inference-bandwidth-high.test.yaml" for x in "ab"
    ]
    assert spied["promtool"].count("team-b/engine-b/tests/inference-bandwidth-high.test.yaml") == 1
    for file, other in zip(failed, reversed(failed), strict=True):
        # each file's own findings: its own namespace, never the other's
        mine = [f.message for f in report.errors if f.file == file]
        assert any(file.split("/")[1] in m for m in mine)
        assert not any(other.split("/")[1] in m for m in mine)


def _body(text: str) -> bytes:
    return HEADER + text.encode()


REL = "team-a/engine-a/tests/x.test.yaml"


def test_the_same_text_under_other_names_abstracts_alike() -> None:
    a = 'series: up{namespace="team-a", pod="engine-a-0"}\njob_name=~"engine-a-sync-(hot|cold)"\n'
    b = a.replace("team-a", "team-b").replace("engine-a", "engine-b")
    assert identity.abstract(REL, [_body(a)]) == identity.abstract(
        "team-b/engine-b/tests/x.test.yaml", [_body(b)]
    )
    assert identity.abstract(REL, [_body(a)]) != identity.abstract(
        "team-b/engine-b/tests/x.test.yaml", [_body(b.replace("cold", "warm"))]
    )


@pytest.mark.parametrize(
    "text",
    [
        # a regex over a label whose values hold the name
        'expr: up{pod=~"eng.*"}\nseries: up{pod="engine-a-0"}\n',
        # a regex holding the name that is not a finite set of strings
        'expr: up{pod=~"engine-a.*"}\n',
        # a sort by a label whose values hold the name
        'description: "{{ range query \\"up\\" | sortByLabel \\"pod\\" }}"\npod: engine-a-0\n',
        # a template function that reads text, also where the template spans lines
        'summary: "{{ $labels.pod | reReplaceAll \\"-.*\\" \\"\\" }}"\npod: engine-a-0\n',
        "description: |\n  {{ $labels.pod\n  | title }}\npod: engine-a-0\n",
        'expr: label_replace(up{pod="engine-a-0"}, "x", "$1", "pod", "(.*)-0")\n',
        'expr: topk(1, up{namespace="team-a"})\n',
    ],
)
def test_text_that_reads_a_name_beyond_equality_is_never_abstracted(text: str) -> None:
    assert identity.abstract(REL, [_body(text)]) is None


def test_only_generated_files_under_dns_names_are_abstracted() -> None:
    assert identity.abstract(REL, [b'pod: "engine-a-0"\n']) is None  # no header
    assert identity.abstract("Team_A/engine-a/tests/x.yaml", [_body("pod: x\n")]) is None
    assert identity.abstract("x.yaml", [_body("pod: x\n")]) is None
    # Kyverno: a wildcard could match one name and not another; a variable could read one
    policy = "match:\n  namespaces: [team-*]\nnamespace: team-a\n"
    assert identity.abstract(REL, [_body(policy)], kyverno=True) is None
    variable = "match:\n  namespaces: [team-a]\nvalue: '{{ request.namespace }}'\n"
    assert identity.abstract(REL, [_body(variable)], kyverno=True) is None
    plain = "match:\n  namespaces: [team-a]\n"
    assert identity.abstract(REL, [_body(plain)], kyverno=True) is not None
