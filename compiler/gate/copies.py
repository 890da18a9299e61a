"""The rules the unit tests load: every copy under ``tests/`` must be the deployed rule.

Each generated promtool test loads a copy of its PrometheusRule's groups from
``tests/*.rules.yaml`` beside it (one copy of the group per alert, or one of all of it).
Every rule in a copy must be the deployed rule, and every deployed rule must have a copy;
otherwise the tests prove nothing about what is deployed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from compiler import yamlio
from compiler.gate import promtool
from compiler.gate.report import Finding
from compiler.gate.reuse import Reuse


def stale_test_rules(
    root: Path,
    sources: Sequence[promtool.RuleSource],
    display: Callable[[str], str],
    memo: Reuse,
) -> list[Finding]:
    """The unit tests load copies of the PrometheusRule's groups from ``tests/*.rules.yaml``
    beside it (one copy of the group per alert, or one of all of it). Every rule in a copy
    must be the deployed rule, and every deployed rule must have a copy; otherwise the tests
    prove nothing about what is deployed."""
    findings: list[Finding] = []
    listed: dict[Path, list[str]] = {}  # directory -> its copies (relative to root)
    copies: dict[Path, list[tuple[str, Any]]] = {}  # directory -> (file, parsed copy)
    for src in sources:
        tests_dir = Path(src.rel_file).parent / "tests"
        if tests_dir not in listed:
            found = (root / tests_dir).glob("*.rules.yaml")
            listed[tests_dir] = sorted((tests_dir / p.name).as_posix() for p in found)
        agreed = memo.copies_key(src.groups, listed[tests_dir])
        if memo.agreed(agreed):
            continue  # these exact bytes were found in agreement before (not a tool's pass)
        before = len(findings)
        if tests_dir not in copies:
            copies[tests_dir] = []
            for copy_rel in listed[tests_dir]:
                try:
                    docs = yamlio.read_back(memo.read(copy_rel).decode())
                    data: Any = docs[0] if len(docs) == 1 else {}
                except Exception as exc:  # promtool test rules reports the YAML error in full
                    data = {"error": str(exc)}
                copies[tests_dir].append((copy_rel, data))
        deployed = {g.get("name"): g for g in src.groups if isinstance(g, dict)}
        covered: set[tuple[str, int]] = set()
        mine = differs = 0
        for copy_rel, data in copies[tests_dir]:
            groups = data.get("groups") if isinstance(data, dict) else None
            names = [g.get("name") for g in groups or [] if isinstance(g, dict)]
            if not any(n in deployed for n in names):
                continue  # a copy of another PrometheusRule in this directory
            mine += 1
            if not _is_copy_of(groups or [], deployed, covered):
                differs += 1
                findings.append(
                    _stale(
                        display(copy_rel),
                        src,
                        "/groups",
                        f"differs from spec.groups of {src.display_file}; the unit tests "
                        "would test a stale copy of the rules (recompile)",
                    )
                )
        if mine and not differs:  # else no unit tests, or a stale copy said so
            _uncovered(src, deployed, covered, display, findings)
        if len(findings) == before:
            memo.remember(agreed)
    return findings


def _uncovered(
    src: promtool.RuleSource,
    deployed: dict[Any, Any],
    covered: set[tuple[str, int]],
    display: Callable[[str], str],
    findings: list[Finding],
) -> None:
    """A finding for every deployed rule that no copy under tests/ holds."""
    for gi, (name, group) in enumerate(deployed.items()):
        for i, rule in enumerate(group.get("rules") or []):
            if (str(name), i) not in covered:
                rule_name = rule.get("alert") or rule.get("record")
                findings.append(
                    _stale(
                        display(src.rel_file),
                        src,
                        f"/spec/groups/{gi}/rules/{i}",
                        f"no copy under tests/ holds {rule_name!r}: no unit test covers "
                        "it (recompile)",
                    )
                )


def _is_copy_of(groups: list[Any], deployed: dict[Any, Any], covered: set[tuple[str, int]]) -> bool:
    """Whether every group in a copy is the deployed group of that name with some of its
    rules (noting which ones in ``covered``)."""
    for group in groups:
        if not isinstance(group, dict) or group.get("name") not in deployed:
            return False
        real = deployed[group["name"]]
        if {k: v for k, v in group.items() if k != "rules"} != {
            k: v for k, v in real.items() if k != "rules"
        }:
            return False
        real_rules = real.get("rules") or []
        for rule in group.get("rules") or []:
            if rule not in real_rules:
                return False
            covered.add((str(group["name"]), real_rules.index(rule)))
    return True


def _stale(file: str, src: promtool.RuleSource, pointer: str, message: str) -> Finding:
    return Finding(file, "PrometheusRule", src.name, pointer, message, "standbyc")
