"""Run kubeconform once per Kubernetes version over all files, and parse what it says."""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler import tools
from compiler.errors import ToolFailed
from compiler.gate.report import Finding, VersionResult
from compiler.gate.schemas import SchemaDir

# In kubeconform's ``msg`` every leaf error reads "- at '<pointer>': <text>";
# ``validationErrors`` often carries only the parent ("/spec", "validation failed").
_AT = re.compile(r"(?:^|\s)- at '([^']*)': ")
_NAMED = re.compile(
    r"^(additional properties|missing properties|missing property) (.+?)( not allowed)?$"
)
_QUOTED = re.compile(r"'((?:[^']|'')*)'")
_GENERIC = "validation failed"


@dataclass(frozen=True)
class Run:
    version: VersionResult
    findings: tuple[Finding, ...]
    seconds: float

    @classmethod
    def nothing(cls, version: str) -> Run:
        """No manifest validated at ``version``: what a version that did not run reports."""
        return cls(VersionResult(version, 0, 0, 0, 0), (), 0.0)


def argv(schema_dir: SchemaDir, version: str, files: Sequence[str], workers: int) -> list[str]:
    args = ["-strict", "-summary", "-output", "json", "-n", str(workers)]
    args += ["-kubernetes-version", f"{version}.0"]
    for location in schema_dir.locations():
        args += ["-schema-location", location]
    return [*args, *files]


def run(
    schema_dir: SchemaDir,
    version: str,
    files: Sequence[str],
    *,
    cwd: Path,
    display_root: str,
    workers: int = 2,
) -> Run:
    """Validate ``files`` (relative to ``cwd``) against one Kubernetes version."""
    result = tools.run(
        "kubeconform", argv(schema_dir, version, files, workers), ok_codes=(0, 1), cwd=cwd
    )
    try:
        data: dict[str, Any] = json.loads(result.stdout)
    except ValueError as exc:
        raise ToolFailed(f"kubeconform printed no JSON\n{result.describe()}") from exc
    summary = data.get("summary", {})
    findings: list[Finding] = []
    for res in data.get("resources", []):
        findings.extend(parse_resource(res, display_root=display_root, kube_version=version))
    vr = VersionResult(
        kube_version=version,
        valid=int(summary.get("valid", 0)),
        invalid=int(summary.get("invalid", 0)),
        errors=int(summary.get("errors", 0)),
        skipped=int(summary.get("skipped", 0)),
    )
    return Run(vr, tuple(findings), result.seconds)


def combine(first: Run, second: Run) -> Run:
    """One version's run over two disjoint sets of files."""
    a, b = first.version, second.version
    counts = VersionResult(a.kube_version, a.valid + b.valid, a.invalid + b.invalid,
                           a.errors + b.errors, a.skipped + b.skipped)  # fmt: skip
    return Run(counts, first.findings + second.findings, first.seconds + second.seconds)


def parse_resource(res: dict[str, Any], *, display_root: str, kube_version: str) -> list[Finding]:
    status = res.get("status")
    if status in ("statusValid", "statusEmpty"):
        return []
    file = f"{display_root}/{res.get('filename', '')}" if display_root else res.get("filename", "")
    kind, name = res.get("kind", ""), res.get("name", "")
    msg: str = res.get("msg", "")

    def finding(pointer: str, message: str) -> Finding:
        return Finding(file, kind, name, pointer, message, "kubeconform", "error", (kube_version,))

    if status == "statusSkipped":
        # A skipped resource is not validated; standbyc never asks kubeconform to skip.
        return [finding("", "skipped by kubeconform: not validated")]
    if status == "statusError" and msg.startswith("could not find schema for"):
        return [finding("", f"no schema: {msg} (every emitted kind needs a schema)")]
    leaves = split_msg(msg)
    if not leaves:
        errors = res.get("validationErrors") or []
        leaves = [(e.get("path", ""), e.get("msg", "")) for e in errors] or [("", msg)]
    return [finding(pointer, message) for pointer, message in leaves]


def split_msg(msg: str) -> list[tuple[str, str]]:
    """Leaf ``(pointer, message)`` pairs of a kubeconform ``msg``.

    A parent that only says "validation failed" is dropped when a child explains it.
    Unknown and missing fields get the field's own pointer, which is the exact place.
    """
    matches = list(_AT.finditer(msg))
    pairs: list[tuple[str, str]] = []
    for i, m in enumerate(matches):
        end = matches[i + 1].start() if i + 1 < len(matches) else len(msg)
        pairs.append((m.group(1), msg[m.end() : end].strip()))
    pairs = [
        (ptr, text)
        for ptr, text in pairs
        if not (text == _GENERIC and any(o.startswith(ptr + "/") for o, _ in pairs))
    ]
    out: list[tuple[str, str]] = []
    for ptr, text in pairs:
        named = _NAMED.match(text)
        if named:
            fields = _QUOTED.findall(named.group(2))
            what = (
                "unknown field"
                if named.group(1).startswith("additional")
                else "missing required field"
            )
            for name in fields:
                note = f" ({text})" if len(fields) > 1 else ""
                out.append((f"{ptr}/{_escape(name)}", f"{what} '{name}'{note}"))
        else:
            out.append((ptr, text))
    return out


def _escape(token: str) -> str:
    """RFC 6901: ``~`` and ``/`` inside one reference token."""
    return token.replace("~", "~0").replace("/", "~1")
