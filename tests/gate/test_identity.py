"""Unit tests that differ only in their spec's name and namespace share one run of the real
promtool and kyverno; a shared run that fails runs each of them again, so every file gets its
own messages; and a test where a value holding a name is read beyond equality is never
shared."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from compiler.api import compile_tree
from compiler.gate import kyverno, promtool
from compiler.reuse import identity
from compiler.validation import run_gate
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
    out = _specs(tmp_path, ("ml-a", "engine-a"), ("ml-b", "engine-b"))
    report = run_gate(out, schema_dir=validators, display_root="out")
    assert report.ok, report.summary_text()
    files = {r.file for r in report.rule_tests}
    assert len(files) == 18 and all(r.ok for r in report.rule_tests)
    # The generation is in WeightSyncJobFailed's text and the record's, the same for both:
    # all 9 shared.
    assert sorted(spied["promtool"]) == sorted(
        f for f in (p.removeprefix("out/") for p in files) if f.startswith("ml-a/")
    )
    assert spied["kyverno"] == ["ml-a/engine-a/tests/kyverno"]
    assert {t.file for t in report.policy_tests} == {
        f"out/ml-{x}/engine-{x}/tests/kyverno/kyverno-test.yaml" for x in "ab"
    }
    assert report.reused == 9 + 1


def test_a_shared_run_that_fails_runs_each_test_on_its_own(
    tmp_path: Path, validators: Path, spied: dict[str, list[str]]
) -> None:
    out = _specs(tmp_path, ("ml-a", "engine-a"), ("ml-b", "engine-b"))
    for x in "ab":  # the same wrong expectation in both: still one shape
        test = out / f"ml-{x}/engine-{x}/tests/inference-bandwidth-high.test.yaml"
        test.write_text(test.read_text().replace("severity: warning", "severity: info"))
    report = run_gate(out, schema_dir=validators, display_root="out")
    assert not report.ok
    failed = sorted(r.file for r in report.rule_tests if not r.ok)
    assert failed == [
        f"out/ml-{x}/engine-{x}/tests/inference-bandwidth-high.test.yaml" for x in "ab"
    ]
    assert spied["promtool"].count("ml-b/engine-b/tests/inference-bandwidth-high.test.yaml") == 1
    for file, other in zip(failed, reversed(failed), strict=True):
        # each file's own findings: its own namespace, never the other's
        mine = [f.message for f in report.errors if f.file == file]
        assert any(file.split("/")[1] in m for m in mine)
        assert not any(other.split("/")[1] in m for m in mine)


def _body(text: str) -> bytes:
    return HEADER + text.encode()


REL = "ml-a/engine-a/tests/x.test.yaml"
OTHER = "ml-b/engine-b/tests/x.test.yaml"


def _unit(
    expr: str = 'up{namespace="ml-a", pod="engine-a-0"} == 0',
    *,
    series: str = 'up{namespace="ml-a", pod="engine-a-0"}',
    description: str = "{{ $labels.pod }} of ml-a/engine-a is down",
    alert: str = "EngineDown",
    values: str = "0x10",
) -> list[bytes]:
    """A promtool test and the rules file it lists, as standbyc lays them out."""
    test = f"""rule_files:
  - x.rules.yaml
evaluation_interval: 1m
tests:
  - name: {alert} for engine-a
    interval: 1m
    input_series:
      - series: '{series}'
        values: {values}
    alert_rule_test:
      - eval_time: 5m
        alertname: {alert}
        exp_alerts:
          - exp_labels:
              namespace: ml-a
              pod: engine-a-0
            exp_annotations:
              description: 'engine-a-0 of ml-a/engine-a is down'
"""
    rules = f"""groups:
  - name: standbyc.ml-a.engine-a
    rules:
      - alert: {alert}
        expr: '{expr}'
        annotations:
          description: '{description}'
"""
    return [_body(test), _body(rules)]


def _renamed(texts: list[bytes]) -> list[bytes]:
    return [t.replace(b"ml-a", b"ml-b").replace(b"engine-a", b"engine-b") for t in texts]


@pytest.mark.parametrize(
    "shape",
    [
        {},
        # a regex holding the name that is a finite set of strings
        {"expr": 'up{pod=~"engine-a-(0|1)"} == 0'},
        # a regex over a label holding the name, whose verdict the probe shares
        {"expr": 'up{pod=~"engine-a-[0-9]+"} == 0'},
        {"expr": 'up{pod=~"engine-a.*"} == 0'},
        # a label_replace whose result follows the name
        {"expr": 'label_replace(up, "cj", "$1", "pod", "(.+)-[0-9]+") == 0'},
        # a query built with whole-value verbs
        {"description": '{{ with printf "up{pod=%q}" $labels.pod | query }}{{ . | first | value }}'
                        "{{ end }} of ml-a/engine-a is down"},
    ],
)  # fmt: skip
def test_the_same_tests_under_other_names_abstract_alike(shape: dict[str, str]) -> None:
    texts = _unit(**shape)
    abstracted = identity.abstract(REL, texts)
    assert abstracted is not None
    assert identity.abstract(OTHER, _renamed(texts)) == abstracted
    changed = [t.replace(b"0x10", b"1x10") for t in _renamed(texts)]
    assert identity.abstract(OTHER, changed) != abstracted


@pytest.mark.parametrize(
    ("rel", "shape"),
    [
        # a regex over a label whose values hold the name, matching it by its letters
        (REL, {"expr": 'up{pod=~"eng.*"} == 0'}),
        (REL, {"expr": 'up{pod=~"engine-[a-c]-0"} == 0'}),
        # a sort by a label whose values hold the name
        (REL, {"description": '{{ range query "up" | sortByLabel "pod" }}x{{ end }}'}),
        # template functions that read text or its length, also over lines
        (REL, {"description": '{{ $labels.pod | reReplaceAll "-.*" "" }}'}),
        (REL, {"description": "{{ $labels.pod\n | title }}"}),
        (REL, {"description": "{{ if gt (len $labels.pod) 12 }}long{{ end }}"}),
        (REL, {"description": '{{ printf "%14s" $labels.pod }}'}),
        (REL, {"description": "{{ index $labels.pod 0 }}"}),
        (REL, {"description": "{{ slice $labels.pod 0 3 }}"}),
        # PromQL that reads label values beyond equality
        (REL, {"expr": 'label_replace(up, "x", "$1", "pod", "(e[a-n]+)-.*") == 0'}),
        (REL, {"expr": 'topk(1, up{namespace="ml-a"}) == 0'}),
        (REL, {"expr": 'sort_by_label(up, "pod") == 0'}),
        # the name where it is not a string compared for equality
        (REL, {"alert": "EngineDown-engine-a"}),
        (REL, {"expr": 'up{namespace="ml-a"} == 0 # engine-a\nor engine_a'}),
        # an identity in a label value that reads as a number or a duration
        ("10/engine-a/tests/x.test.yaml", {"values": "10x10"}),
        ("10/engine-a/tests/x.test.yaml", {}),
        ("ml-a/5m/tests/x.test.yaml", {}),
        ("ml-a/0x1f/tests/x.test.yaml", {}),
        ("inf/engine-a/tests/x.test.yaml", {}),
    ],
)
def test_text_that_reads_a_name_beyond_equality_is_never_abstracted(
    rel: str, shape: dict[str, str]
) -> None:
    namespace, name = rel.split("/")[:2]
    texts = [
        t.replace(b"ml-a", namespace.encode()).replace(b"engine-a", name.encode())
        for t in _unit(**shape)
    ]
    assert identity.abstract(rel, texts) is None


def test_a_namespace_inside_numbers_is_never_abstracted() -> None:
    """A namespace of digits is inside thresholds and durations: renaming every 10 to 98
    would give the same key to a test of other numbers."""
    texts = [
        t.replace(b"ml-a", b"10") for t in _unit(expr='up{namespace="ml-a"} > 10', values="10x10")
    ]
    assert identity.abstract("10/engine-a/tests/x.test.yaml", texts) is None


def test_only_generated_files_under_dns_names_are_abstracted() -> None:
    assert identity.abstract(REL, [b'pod: "engine-a-0"\n']) is None  # no header
    assert identity.abstract("Team_A/engine-a/tests/x.yaml", [_body("pod: x\n")]) is None
    assert identity.abstract("x.yaml", [_body("pod: x\n")]) is None
    # Kyverno: a wildcard could match one name and not another; a variable could read one
    policy = "match:\n  namespaces: [ml-*]\nnamespace: ml-a\n"
    assert identity.abstract(REL, [_body(policy)], kyverno=True) is None
    variable = "match:\n  namespaces: [ml-a]\nvalue: '{{ request.namespace }}'\n"
    assert identity.abstract(REL, [_body(variable)], kyverno=True) is None
    plain = "match:\n  namespaces: [ml-a]\n"
    assert identity.abstract(REL, [_body(plain)], kyverno=True) is not None
