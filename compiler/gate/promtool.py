"""promtool: ``check rules`` on the groups of every PrometheusRule, ``test rules`` on tests/.

promtool does not accept the PrometheusRule object, so each one's ``spec`` is written to a
plain rules file first. promtool prints a file's header on stdout and its errors on
stderr; both are read through one pipe (``merge_stderr``) so each error stays under its
file. Both commands take many files, so there is one process per command.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from compiler import tools, yamlio
from compiler.gate.report import FileResult, Finding

_CHECK_HEADER = re.compile(r"^Checking (.+)$")
# Prometheus 3.x prints "Processing test file: F"; 2.x (Debian's 2.42) "Unit Testing:  F".
_TEST_HEADER = re.compile(r"^(?:Processing test file|Unit Testing):\s+(.+)$")
_RULE_ERROR = re.compile(
    r'group "(?P<group>.*?)", rule (?P<rule>\d+), "(?P<name>.*?)": (?P<msg>.*)$'
)
_SUCCESS_COUNT = re.compile(r"SUCCESS: (\d+) rules found")
_TEST_CASE = re.compile(
    r"^(?:alertname: (?P<alert>.*?)|expr: (?P<expr>.*?)), time: (?P<time>[^,]+),"
)


@dataclass(frozen=True)
class RuleSource:
    """One PrometheusRule object and the plain rules file written for it."""

    display_file: str  # e.g. out/ns/app/prometheusrule-x.yaml
    name: str
    groups: list[Any]
    plain_file: str  # relative to the temp dir promtool runs in
    rel_file: str = ""  # the PrometheusRule's file, relative to the validated root


@dataclass(frozen=True)
class Outcome:
    results: tuple[FileResult, ...]
    findings: tuple[Finding, ...]
    seconds: float


def write_plain_rules(sources: Iterable[RuleSource], tmp: Path) -> None:
    """Each PrometheusRule's groups as the plain rules file promtool and pint read."""
    for src in sources:
        target = tmp / src.plain_file
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(yamlio.dump({"groups": src.groups}), encoding="utf-8")


def _sections(output: str, header: re.Pattern[str]) -> dict[str, list[str]]:
    """Split merged promtool output into the lines printed under each file's header."""
    sections: dict[str, list[str]] = {}
    current: list[str] | None = None
    for line in output.splitlines():
        m = header.match(line)
        if m:
            current = sections.setdefault(m.group(1).strip(), [])
        elif current is not None:
            current.append(line)
    return sections


def check_rules(sources: Sequence[RuleSource], tmp: Path) -> Outcome:
    if not sources:
        return Outcome((), (), 0.0)
    write_plain_rules(sources, tmp)
    # --lint-fatal: a duplicate recording rule silently overwrites a series; treat it as an error.
    args = ["check", "rules", "--lint-fatal", *(s.plain_file for s in sources)]
    result = tools.run("promtool", args, ok_codes=(0, 1, 3), cwd=tmp, merge_stderr=True)
    sections = _sections(result.stdout, _CHECK_HEADER)
    results: list[FileResult] = []
    findings: list[Finding] = []
    for src in sources:
        lines = sections.get(src.plain_file)
        if lines is None:
            findings.append(
                _finding(src, "", "promtool did not report on this file", "promtool-check")
            )
            results.append(FileResult(src.display_file, False))
            continue
        text = "\n".join(lines)
        counted = _SUCCESS_COUNT.search(text)
        if counted and "FAILED" not in text:
            results.append(FileResult(src.display_file, True, f"{counted.group(1)} rules"))
            continue
        results.append(FileResult(src.display_file, False))
        findings.extend(_check_findings(src, lines))
    return Outcome(tuple(results), tuple(findings), result.seconds)


def _check_findings(src: RuleSource, lines: list[str]) -> list[Finding]:
    body = [ln for ln in lines if ln.strip() and ln.strip() != "FAILED:"]
    out: list[Finding] = []
    loose: list[str] = []
    for line in body:
        m = _RULE_ERROR.search(line)
        if m:
            pointer = _rule_pointer(src.groups, m.group("group"), int(m.group("rule")) - 1)
            msg = m.group("msg")
            if msg.startswith("could not parse expression"):
                pointer += "/expr"
            out.append(_finding(src, pointer, f'rule "{m.group("name")}": {msg}', "promtool-check"))
        else:
            # YAML-level and lint errors carry no group/rule; keep their text whole.
            loose.append(line.replace(f"{src.plain_file}: ", "", 1))
    if loose:
        out.append(_finding(src, "/spec/groups", "\n".join(dict.fromkeys(loose)), "promtool-check"))
    return out


def _rule_pointer(groups: list[Any], group_name: str, rule_index: int) -> str:
    for gi, group in enumerate(groups):
        if isinstance(group, dict) and group.get("name") == group_name:
            return f"/spec/groups/{gi}/rules/{rule_index}"
    return "/spec/groups"


def _finding(src: RuleSource, pointer: str, message: str, tool: str) -> Finding:
    return Finding(src.display_file, "PrometheusRule", src.name, pointer, message, tool)


def merge(outcomes: Sequence[Outcome]) -> Outcome:
    """One outcome from several runs over disjoint files (results in run order)."""
    return Outcome(
        tuple(r for o in outcomes for r in o.results),
        tuple(f for o in outcomes for f in o.findings),
        sum(o.seconds for o in outcomes),
    )


def test_rules(test_files: Sequence[str], *, cwd: Path, display: Callable[[str], str]) -> Outcome:
    """Run ``promtool test rules`` once over ``test_files`` (relative to ``cwd``)."""
    if not test_files:
        return Outcome((), (), 0.0)
    result = tools.run(
        "promtool", ["test", "rules", *test_files], ok_codes=(0, 1), cwd=cwd, merge_stderr=True
    )
    sections = _sections(result.stdout, _TEST_HEADER)
    results: list[FileResult] = []
    findings: list[Finding] = []
    for rel in test_files:
        shown = display(rel)
        lines = sections.get(rel)
        if lines is not None and any(ln.strip() == "SUCCESS" for ln in lines):
            results.append(FileResult(shown, True))
            continue
        results.append(FileResult(shown, False))
        if lines is None:
            findings.append(
                Finding(
                    shown,
                    "RuleTest",
                    Path(rel).name,
                    "",
                    "promtool did not report on this file",
                    "promtool-test",
                )
            )
            continue
        findings.extend(_test_findings(cwd / rel, shown, lines))
    return Outcome(tuple(results), tuple(findings), result.seconds)


def _test_findings(path: Path, shown: str, lines: list[str]) -> list[Finding]:
    blocks: list[list[str]] = []
    for line in lines:
        if not line.strip() or line.strip() == "FAILED:":
            continue
        indent = len(line) - len(line.lstrip())
        if indent <= 4 or not blocks:  # a new error starts at the error's own indentation
            blocks.append([line.strip()])
        else:
            blocks[-1].append(line[4:].rstrip())
    cases = _test_cases(path)
    out: list[Finding] = []
    for block in blocks:
        m = _TEST_CASE.match(block[0])
        name, pointer = "", ""
        if m:
            name = m.group("alert") or m.group("expr") or ""
            pointer = cases.get((name, _seconds(m.group("time").strip())), "")
        out.append(Finding(shown, "RuleTest", name, pointer, "\n".join(block), "promtool-test"))
    return out


_DURATION = re.compile(r"(\d+)(ms|y|w|d|h|m|s)")
_UNIT = {"ms": 0.001, "s": 1, "m": 60, "h": 3600, "d": 86400, "w": 604800, "y": 31536000}


def _seconds(text: str) -> float | None:
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(int(n) * _UNIT[u] for n, u in parts)


def _test_cases(path: Path) -> dict[tuple[str, float | None], str]:
    """(alertname or expr, eval_time) -> JSON pointer of that case in a test file."""
    try:
        data = YAML(typ="safe").load(path.read_text())
    except Exception:  # the file is promtool's to judge; a pointer is only a courtesy
        return {}
    cases: dict[tuple[str, float | None], str] = {}
    for ti, test in enumerate((data or {}).get("tests") or []):
        for key, field in (("alert_rule_test", "alertname"), ("promql_expr_test", "expr")):
            for ci, case in enumerate(test.get(key) or []):
                label = str(case.get(field, "")).strip()
                cases[(label, _seconds(str(case.get("eval_time", ""))))] = f"/tests/{ti}/{key}/{ci}"
    return cases
