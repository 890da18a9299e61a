"""pint (cloudflare's rule linter) in offline mode, as an extra lint on the plain rules files.

pint is optional: when it is not installed the report says so, and ``doctor`` shows how to
install it. Bug and Fatal problems fail validation (pint's own ``--fail-on bug``); warnings
are reported and do not.
"""

from __future__ import annotations

import json
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedSeq

from compiler import tools
from compiler.errors import ToolFailed
from compiler.gate.promtool import Outcome, RuleSource
from compiler.gate.report import ERROR, WARNING, Finding

_FAILING = {"bug", "fatal"}


@dataclass(frozen=True)
class _RuleLines:
    starts: list[tuple[int, str]]  # (1-based first line, JSON pointer in the PrometheusRule)

    def pointer(self, line: int) -> str:
        found = "/spec/groups"
        for start, ptr in self.starts:
            if start <= line:
                found = ptr
        return found


def _rule_lines(path: Path) -> _RuleLines:
    data = YAML(typ="rt", pure=True).load(path.read_text())
    starts: list[tuple[int, str]] = []
    groups = data.get("groups") or []
    for gi, group in enumerate(groups):
        rules: CommentedSeq = group.get("rules") or CommentedSeq()
        for ri in range(len(rules)):
            starts.append((rules.lc.item(ri)[0] + 1, f"/spec/groups/{gi}/rules/{ri}"))
    return _RuleLines(sorted(starts))


def lint(sources: Sequence[RuleSource], tmp: Path) -> Outcome:
    """Lint the plain rules files that ``promtool.check_rules`` wrote into ``tmp``."""
    if not sources:
        return Outcome((), (), 0.0)
    with tempfile.NamedTemporaryFile(suffix=".json", dir=tmp, delete=False) as fh:
        report_path = Path(fh.name)
    args = ["--offline", "--no-color", "lint", "--json", str(report_path)]
    result = tools.run("pint", [*args, *(s.plain_file for s in sources)], ok_codes=(0, 1), cwd=tmp)
    try:
        problems: list[dict[str, Any]] = json.loads(report_path.read_text() or "[]")
    except ValueError as exc:
        raise ToolFailed(f"pint wrote no JSON report\n{result.describe()}") from exc
    by_file = {s.plain_file: s for s in sources}
    findings: list[Finding] = []
    for problem in problems:
        src = by_file.get(problem.get("path", ""))
        if src is None:
            continue
        lines = problem.get("lines") or [0]
        pointer = _rule_lines(tmp / src.plain_file).pointer(int(lines[0]))
        severity = ERROR if str(problem.get("severity", "")).lower() in _FAILING else WARNING
        text = f"{problem.get('problem', '')} ({problem.get('reporter', '')})"
        if len(lines) > 1 or lines[0]:
            span = f"lines {min(lines)}-{max(lines)}" if len(lines) > 1 else f"line {lines[0]}"
            text += f"; {span} of the rules file"
        if details := str(problem.get("details") or "").strip():
            text += f"\n{details}"  # pint's own explanation, whole
        findings.append(
            Finding(src.display_file, "PrometheusRule", src.name, pointer, text, "pint", severity)
        )
    return Outcome((), tuple(findings), result.seconds)
