"""pint (cloudflare's rule linter) in offline mode, as an extra lint on the plain rules files.

pint is optional: when it is not installed the report says so, and ``doctor`` shows how to
install it. Bug and Fatal problems fail validation (pint's own ``--fail-on bug``); warnings
are reported and do not.
"""

from __future__ import annotations

import json
import re
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
    # (1-based first line, JSON pointer in the PrometheusRule, the rule's alert or record)
    starts: list[tuple[int, str, str]]

    def rule(self, line: int) -> tuple[str, str]:
        """The pointer and the name of the rule at ``line`` of the plain rules file."""
        found = ("/spec/groups", "")
        for start, ptr, name in self.starts:
            if start <= line:
                found = (ptr, name)
        return found


def _rule_lines(path: Path) -> _RuleLines:
    data = YAML(typ="rt", pure=True).load(path.read_text())
    starts: list[tuple[int, str, str]] = []
    groups = data.get("groups") or []
    for gi, group in enumerate(groups):
        rules: CommentedSeq = group.get("rules") or CommentedSeq()
        for ri, rule in enumerate(rules):
            name = str(rule.get("alert") or rule.get("record") or "")
            starts.append((rules.lc.item(ri)[0] + 1, f"/spec/groups/{gi}/rules/{ri}", name))
    return _RuleLines(sorted(starts))


_MD_LINK = re.compile(r"\[([^\]]+)\]\((https?://[^)\s]+)\)")


def _plain(details: str) -> str:
    """pint's explanation, which it writes in Markdown, as text: ``[docs](url)`` reads as
    ``docs: url``."""
    return _MD_LINK.sub(r"\1 (\2)", details)


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
        pointer, rule = _rule_lines(tmp / src.plain_file).rule(int(lines[0]))
        severity = ERROR if str(problem.get("severity", "")).lower() in _FAILING else WARNING
        text = f"{problem.get('problem', '')} ({problem.get('reporter', '')})"
        if rule:  # the lines pint counts are of a scratch file: the rule's name is what helps
            text += f" in {rule}"
        if details := str(problem.get("details") or "").strip():
            text += f"; {_plain(details)}"  # pint's own explanation, whole
        findings.append(
            Finding(src.display_file, "PrometheusRule", src.name, pointer, text, "pint", severity)
        )
    return Outcome((), tuple(findings), result.seconds)
