"""Speed never changes a verdict: the gate with every reuse on (a cold cache, then a warm
one) gives each file the verdict a plain run gives (``STANDBYC_REUSE=off``: every validator
on every input, nothing shared, nothing cached, nothing passed on the side).

Over the example specs and the golden cases as compiled, the same trees renamed to
identities that tempt a sharing shortcut (digits, substrings of numbers, names of PromQL
functions, YAML specials, names too long for Kubernetes), and a batch of small generated
unit tests whose verdict hangs on the identity only through a function, a regex, a width
or a number: a sound gate shares none of those wrongly. ``make fuzz`` runs a larger batch.
"""

from __future__ import annotations

import os
import random
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import settings

from compiler import yamlio
from compiler.gate import Report
from compiler.validation import run_gate
from tests.conftest import OUT, REPO

CASES = REPO / "tests" / "cases"
SEED = int(os.environ.get("STANDBYC_DIFF_SEED", "20261202"))
# Identities that tempt a shortcut: numbers and durations, substrings of one another,
# PromQL words, YAML 1.1 specials, and lengths on either side of Kubernetes' limits.
NAMESPACES = ["ml-a", "ml-b", "10", "98", "5m", "1e3", "0x1f", "inf", "true", "llm",
              "sum", "up", "team-a", "team-b", "rate"]  # fmt: skip
NAMES = ["engine-a", "engine-b", "llm-grpc", "llm", "10", "1", "nan", "null", "job", "e",
         "a" * 40, "b" * 40, "on", "pod", "x-10m"]  # fmt: skip


@pytest.fixture
def reuse_runs(
    tmp_path: Path, validators: Path, monkeypatch: pytest.MonkeyPatch
) -> Callable[[Path], list[tuple[str, Report]]]:
    """The gate over a tree three ways: reuse on with a cold cache, on with the cache
    that run left, and off."""

    def runs(root: Path) -> list[tuple[str, Report]]:
        out = []
        monkeypatch.setenv("STANDBYC_CACHE", "on")
        monkeypatch.setenv("STANDBYC_CACHE_DIR", str(tmp_path / "cache"))
        for label in ("cold", "warm"):
            out.append((label, run_gate(root, schema_dir=validators, display_root="out")))
        monkeypatch.setenv("STANDBYC_REUSE", "off")
        out.append(("plain", run_gate(root, schema_dir=validators, display_root="out")))
        monkeypatch.delenv("STANDBYC_REUSE")
        return out

    return runs


def verdicts(report: Report) -> dict[str, object]:
    """Every file's verdict from every validator, the counts per Kubernetes version, and
    every finding's place and message."""
    return {
        "ok": report.ok,
        "files": sorted(
            (kind, r.file, r.ok)
            for kind, results in (
                ("check", report.rule_checks),
                ("test", report.rule_tests),
                ("policy", report.policy_tests),
            )
            for r in results
        ),
        "versions": [(v.kube_version, v.valid, v.invalid, v.errors) for v in report.versions],
        "findings": sorted(
            (f.file, f.tool, f.kind, f.name, f.pointer, f.message, f.kube_versions)
            for f in report.findings
        ),
    }


def assert_agree(runs: list[tuple[str, Report]]) -> None:
    plain = verdicts(runs[-1][1])
    for label, report in runs[:-1]:
        mine = verdicts(report)
        for part, expected in plain.items():
            assert mine[part] == expected, f"{label} run differs from a plain run in {part}"


def _renamed(source: Path, target: Path, old: tuple[str, str], new: tuple[str, str]) -> None:
    """A compiled spec directory under another namespace and name, as if compiled so."""
    for path in sorted(source.rglob("*")):
        if not path.is_file():
            continue
        rel = path.relative_to(source).as_posix()
        text = path.read_text()
        for a, b in zip(old, new, strict=True):
            rel, text = rel.replace(a, b), text.replace(a, b)
        dest = target / rel
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)


def test_the_examples_and_golden_cases_get_the_verdicts_of_plain_runs(
    tmp_path: Path, reuse_runs: Callable[[Path], list[tuple[str, Report]]]
) -> None:
    root = tmp_path / "tree"
    shutil.copytree(OUT, root)
    for case in sorted(CASES.glob("*/expected")):
        for spec_dir in sorted(p for p in case.glob("*/*") if p.is_dir()):
            dest = root / spec_dir.relative_to(case)
            if not dest.exists():
                shutil.copytree(spec_dir, dest)
    # The seed spec under tempting identities: its tests differ only in them.
    seed = root / "inference-system" / "inference-engine"
    for namespace, name in [("10", "engine-a"), ("98", "engine-a"), ("ml-a", "a" * 52),
                            ("ml-b", "sum"), ("llm", "llm-grpc")]:  # fmt: skip
        _renamed(seed, root / namespace / name, ("inference-system", "inference-engine"),
                 (namespace, name))  # fmt: skip
    runs = reuse_runs(root)
    assert_agree(runs)
    assert runs[0][1].reused > 0  # sharing did happen where it is sound


# -- generated unit tests ------------------------------------------------------------------


def _unit(kind: str, namespace: str, name: str, rng: random.Random) -> tuple[object, object]:
    """A promtool test and its rules, of one kind, for this identity."""
    pod = f"{name}-0"
    series = [f'up{{namespace="{namespace}", pod="{pod}"}}']
    expr = f'up{{namespace="{namespace}"}} == 0'
    description = f"{{{{ $labels.pod }}}} of {namespace}/{name} is down"
    expected = f"{pod} of {namespace}/{name} is down"
    values = "0x10"
    labels: dict[str, str] = {"namespace": namespace, "pod": pod}
    threshold = rng.choice(["10", "98", "5", "1e3"])
    if kind == "threshold":  # a number that may be the namespace
        expr = f'up{{namespace="{namespace}"}} * 20 > {threshold}'
        values = "1x10"
    elif kind == "length":
        description = "{{ if gt (len $labels.pod) 12 }}long{{ else }}short{{ end }}"
        expected = "long"
    elif kind == "width":
        description = '{{ printf "%.9s" $labels.pod }}'
        expected = pod
    elif kind == "slice":
        description = "{{ slice $labels.pod 0 2 }}"
        expected = "en"
    elif kind == "upper":
        description = "{{ $labels.pod | toUpper }}"
        expected = pod
    elif kind == "regex":
        expr = f'up{{namespace="{namespace}", pod=~"[a-m].*"}} == 0'
    elif kind == "regex-holding":
        expr = f'up{{namespace="{namespace}", pod=~"{name}-[0-9]"}} == 0'
    elif kind == "label-replace":
        expr = f'label_replace(up{{namespace="{namespace}"}}, "x", "$1", "pod", "([a-m]+).*") == 0'
        labels["x"] = name
    elif kind == "sort":
        series.append(f'up{{namespace="{namespace}", pod="m-0"}}')
        description = '{{ range query "up == 0" | sortByLabel "pod" }}{{ .Labels.pod }}{{ end }}'
        expected = f"m-0{pod}"
    test = {
        "rule_files": [f"{kind}.rules.yaml"],
        "evaluation_interval": "1m",
        "tests": [
            {
                "name": f"{kind} of {name}",
                "interval": "1m",
                "input_series": [{"series": s, "values": values} for s in series],
                "alert_rule_test": [
                    {
                        "eval_time": "5m",
                        "alertname": "Down",
                        "exp_alerts": [
                            {"exp_labels": labels, "exp_annotations": {"description": expected}}
                        ],
                    }
                ],
            }
        ],
    }
    rules = {
        "groups": [
            {
                "name": f"standbyc.{namespace}.{name}",
                "rules": [
                    {"alert": "Down", "expr": expr, "annotations": {"description": description}}
                ],
            }
        ]
    }
    return test, rules


UNIT_KINDS = ["plain", "threshold", "length", "width", "slice", "upper", "regex",
              "regex-holding", "label-replace", "sort"]  # fmt: skip


def _identities(rng: random.Random, count: int) -> Iterator[tuple[str, str]]:
    pairs = [(ns, n) for ns in NAMESPACES for n in NAMES]
    rng.shuffle(pairs)
    yield from pairs[:count]


def _generated(root: Path, cases: int, seed: int) -> None:
    rng = random.Random(seed)
    per = min(len(UNIT_KINDS), max(3, cases // 1200))  # 3 by default, all in make fuzz
    for namespace, name in _identities(rng, max(1, cases // per)):
        for kind in rng.sample(UNIT_KINDS, per):
            test, rules = _unit(kind, namespace, name, rng)
            tests = root / namespace / name / "tests"
            tests.mkdir(parents=True, exist_ok=True)
            (tests / f"{kind}.test.yaml").write_text(yamlio.document(test, "specs/x.yaml"))
            (tests / f"{kind}.rules.yaml").write_text(yamlio.document(rules, "specs/x.yaml"))


def test_generated_unit_tests_get_the_verdicts_of_plain_runs(
    tmp_path: Path, reuse_runs: Callable[[Path], list[tuple[str, Report]]]
) -> None:
    """Identities crossed with unit tests whose verdict depends on the identity's length,
    letters, order or digits: wrongly shared, one of a family would take another's."""
    cases = 6 * (settings().max_examples or 40)  # 240 by default, many more in make fuzz
    root = tmp_path / "tree"
    _generated(root, cases, SEED)
    runs = reuse_runs(root)
    plain = runs[-1][1]
    outcomes = {r.ok for r in plain.rule_tests}
    assert outcomes == {True, False}, "the batch should hold both passing and failing tests"
    assert_agree(runs)


SPELLINGS = {
    "escaped": lambda t: t.replace("kind: PrometheusRule", 'kind: "Prometheus\\x52ule"'),
    "anchored": lambda t: t.replace("kind: PrometheusRule", "kind: &k PrometheusRule"),
}


def test_a_prometheusrule_however_spelled_gets_the_verdict_of_a_plain_run(
    tmp_path: Path, reuse_runs: Callable[[Path], list[tuple[str, Report]]]
) -> None:
    """The PrometheusRule with an expression only promtool refuses, its kind written with an
    escape or an anchor, beside its tests: found by parsing in every run."""
    root = tmp_path / "tree"
    source = OUT / "llm-serving" / "llm-grpc"
    for label, spelling in SPELLINGS.items():
        target = root / "llm-serving" / f"llm-grpc-{label}"
        (target / "tests").mkdir(parents=True)
        for part in ("test", "rules"):  # one of its unit tests, to keep the run short
            name = f"standby-weights-behind.{part}.yaml"
            shutil.copy(source / "tests" / name, target / "tests" / name)
        text = spelling((source / "prometheusrule-llm-grpc-failover.yaml").read_text())
        broken = text.replace("_generation{", "_generation{{", 1)  # promtool alone sees this
        (target / "prometheusrule-llm-grpc-failover.yaml").write_text(broken)
    runs = reuse_runs(root)
    plain = runs[-1][1]
    assert not plain.ok
    checked = [r for r in plain.rule_checks if not r.ok]
    assert len(checked) == len(SPELLINGS)
    assert_agree(runs)
