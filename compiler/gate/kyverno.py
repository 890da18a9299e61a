"""``kyverno test`` with the real Kyverno CLI over every ``tests/**/kyverno-test.yaml``
(``compiler.gate.discover`` finds them).

The CLI is optional (``standbyc tools install --optional``; it is a long build): without it
the report says the policy tests were not run. One process runs every test directory; with
``-o json`` it prints, after each test's "Loading test ( FILE )" line, a JSON array with one
row per (rule, resource) and its result.

A row's ``Pass`` alone does not prove a mutation: the CLI also reports ``Pass`` (reason
``Excluded``) for a resource the rule did not match, even where the test expects the rule to
patch it. So every resource a test expects a rule to ``pass`` on must come back with reason
``Ok``; a policy that matches no Pod at all then fails its test.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path

from ruamel.yaml import YAML

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


def expected_applied(test: Path) -> set[tuple[str, str, str, str]]:
    """(policy, rule, kind, resource name) of every ``result: pass`` the test expects (the
    rule matched and, with ``patchedResources``, patched exactly so)."""
    try:
        doc = YAML(typ="safe").load(test.read_text(encoding="utf-8"))
    except Exception:
        return set()  # the CLI reports what it cannot load
    out: set[tuple[str, str, str, str]] = set()
    results = doc.get("results") if isinstance(doc, dict) else None
    for r in results if isinstance(results, list) else []:
        if not isinstance(r, dict) or r.get("result") != "pass":
            continue
        for name in r.get("resources") or []:
            out.add((str(r.get("policy")), str(r.get("rule")), str(r.get("kind")), str(name)))
    return out


def _unapplied(
    expected: set[tuple[str, str, str, str]], rows: list[dict[str, object]]
) -> list[dict[str, object]]:
    """The expected passes that the CLI did not report as applied (reason ``Ok``)."""
    applied = set()
    for row in rows:
        # [group/]version/Kind/[namespace/]name: the kind is the one part with a capital
        parts = str(row.get("RESOURCE", "")).split("/")
        kind = next((part for part in parts[:-1] if part[:1].isupper()), None)
        if row.get("REASON") == "Ok" and kind is not None:
            applied.add((str(row.get("POLICY")), str(row.get("RULE")), kind, parts[-1]))
    return [
        {"POLICY": p, "RULE": r, "RESOURCE": f"{k}/{n}", "RESULT": "Not applied",
         "REASON": "the rule did not match it; kyverno reports that as Pass (Excluded)"}
        for p, r, k, n in sorted(expected - applied)
    ]  # fmt: skip


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
        failed += _unapplied(expected_applied(cwd / rel), rows)
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
