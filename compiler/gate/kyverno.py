"""``kyverno test`` with the real Kyverno CLI over every ``tests/**/kyverno-test.yaml``
(``compiler.gate.discover`` finds them).

The CLI is optional (``standbyc tools install --optional``; it is a long build): without it
the report says the policy tests were not run. One process runs every test directory; with
``-o json`` it prints, after each test's "Loading test ( FILE )" line, a JSON array with one
row per (rule, resource) and its result.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from compiler import tools
from compiler.gate.promtool import Outcome
from compiler.gate.report import FileResult, Finding

TOOL = "kubectl-kyverno"
TEST_FILE = "kyverno-test.yaml"
_LOADING = re.compile(r"^Loading test\s+\(\s*(.+?)\s*\)")


def _sections(output: str) -> dict[str, list[dict[str, object]] | None]:
    """Each test file named in the output -> its result rows (None: no JSON followed)."""
    decoder = json.JSONDecoder()
    out: dict[str, list[dict[str, object]] | None] = {}
    current: str | None = None
    pos = 0
    for line in output.splitlines(keepends=True):
        start = pos
        pos += len(line)
        m = _LOADING.match(line.strip())
        if m:
            current = m.group(1)
            out[current] = None
        elif current is not None and out[current] is None and line.strip() == "[":
            rows, _ = decoder.raw_decode(output, start + line.index("["))
            out[current] = rows if isinstance(rows, list) else None
    return out


def run(dirs: Sequence[str], *, cwd: Path, display: Callable[[str], str]) -> Outcome:
    if not dirs:
        return Outcome((), (), 0.0)
    result = tools.run(
        TOOL,
        ["test", *dirs, "--remove-color", "-o", "json"],
        ok_codes=(0, 1),
        cwd=cwd,
        merge_stderr=True,
    )
    sections = _sections(result.stdout)
    results: list[FileResult] = []
    findings: list[Finding] = []
    for d in dirs:
        rel = f"{d}/{TEST_FILE}" if d != "." else TEST_FILE
        shown = display(rel)
        rows = sections.get(rel)
        if rows is None:
            results.append(FileResult(shown, False))
            tail = "\n".join(result.stdout.strip().splitlines()[-5:])
            findings.append(
                Finding(
                    shown,
                    "Test",
                    "",
                    "",
                    f"kyverno did not report on this test:\n{tail}",
                    "kyverno",
                )
            )
            continue
        failed = [row for row in rows if row.get("RESULT") != "Pass"]
        results.append(FileResult(shown, not failed, f"{len(rows)} results"))
        for row in failed:
            findings.append(
                Finding(
                    shown,
                    "ClusterPolicy",
                    str(row.get("POLICY", "")),
                    f"rule {row.get('RULE', '')}",
                    f"{row.get('RESOURCE', '')}: {row.get('RESULT', '')} ({row.get('REASON', '')})",
                    "kyverno",
                )
            )
    return Outcome(tuple(results), tuple(findings), result.seconds)
