"""One kubeconform pass per schema, not per Kubernetes version.

Most kinds' schemas do not change between the versions of the matrix but for their
descriptions (a CRD's never does; ConfigMap's, ServiceAccount's, NetworkPolicy's hardly),
and a description takes no part in validation. A manifest whose schema at a later version
has the same *shape* (the schema without its descriptions, and without the
``x-kubernetes-*`` annotations the API server reads, such as ``x-kubernetes-list-type``:
they are no JSON Schema keywords, and kubeconform's validator ignores them) as at an earlier
one gets that earlier version's result: same document, same schema, same verdict. Only a kind whose
schema really changed (a Deployment's PodSpec grows each release) is validated again.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from compiler import cache
from compiler.gate.kubeconform import Run
from compiler.gate.report import Finding, VersionResult
from compiler.gate.schemas import SchemaDir

_TOP = re.compile(rb"^(apiVersion|kind):[ \t]*['\"]?([\w./-]+)['\"]?[ \t]*$", re.MULTILINE)
_DATA = ("enum", "const", "default", "examples")  # values that are data, not schemas


def schema_file(sd: SchemaDir, version: str, api_version: str, kind: str) -> Path | None:
    """The file kubeconform takes for this kind at ``version`` (its locations in order)."""
    group, _, ver = api_version.rpartition("/")
    suffix = f"-{group.split('.')[0]}-{ver}" if group else f"-{ver}"
    for folder in (sd.kube_dir(version), sd.crds):
        path = folder / f"{kind.lower()}{suffix}.json"
        if path.is_file():
            return path
    return None


@functools.cache
def shape(path: Path, stamp: tuple[int, int]) -> str:
    """The digest of the schema at ``path`` without its descriptions (``stamp``: its size
    and modification time, so a rebuilt schema is read again), remembered in the cache."""
    store = cache.Store("gate")
    k = cache.key("schema-shape", str(path), *(str(n) for n in stamp))
    if (seen := store.get(k)) is not None:
        return seen.decode()
    data = json.loads(path.read_bytes())
    text = json.dumps(_shape(data), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(text.encode()).hexdigest()
    store.put(k, digest.encode())
    return digest


def _shape(node: Any) -> Any:
    if isinstance(node, list):
        return [_shape(v) for v in node]
    if not isinstance(node, dict):
        return node
    return {
        k: (v if k in _DATA else _shape(v))
        for k, v in node.items()
        # (a property named so is a dict, and stays)
        if not (k == "description" and isinstance(v, str))
        and not (k.startswith("x-kubernetes-") and not isinstance(v, dict))
    }


def owners(
    sd: SchemaDir, versions: Sequence[str], manifests: Sequence[str], read: Callable[[str], bytes]
) -> dict[tuple[str, str], str]:
    """(manifest, version) -> the earlier version whose result it takes, for every pair
    whose schema has the shape it had there. A manifest of several documents, or without
    a schema, is validated at every version."""
    out: dict[tuple[str, str], str] = {}
    by_kind: dict[tuple[str, str], dict[str, str] | None] = {}  # -> version -> first version
    for rel in manifests:
        data = read(rel)
        found = _TOP.findall(data)
        head = {k.decode(): v.decode() for k, v in found}
        if len(found) != 2 or len(head) != 2 or b"\n---" in data:
            continue
        kind = (head["apiVersion"], head["kind"])
        if kind not in by_kind:
            by_kind[kind] = _firsts(sd, versions, *kind)
        for v, first in (by_kind[kind] or {}).items():
            if first != v:
                out[(rel, v)] = first
    return out


def _firsts(
    sd: SchemaDir, versions: Sequence[str], api_version: str, kind: str
) -> dict[str, str] | None:
    """Version -> the first version whose schema for this kind has the same shape; None
    when a version has no schema for it (kubeconform reports that at each)."""
    seen: dict[str, str] = {}  # shape -> the first version with it
    out: dict[str, str] = {}
    for v in versions:
        path = schema_file(sd, v, api_version, kind)
        if path is None:
            return None
        st = path.stat()
        out[v] = seen.setdefault(shape(path, (st.st_size, st.st_mtime_ns)), v)
    return out


def mirror(
    runs: dict[str, Run],
    owned: dict[tuple[str, str], str],
    display: Callable[[str], str],
    documents: Callable[[str], int],
) -> list[Run]:
    """Each version's run with the manifests it took from an earlier version added: their
    counts, and their findings (listing this version too)."""
    by_file: dict[tuple[str, str], list[Finding]] = {}
    for version, run in runs.items():
        for f in run.findings:
            by_file.setdefault((version, f.file), []).append(f)
    out: list[Run] = []
    for version, run in runs.items():
        valid, invalid, findings = 0, 0, list(run.findings)
        for (rel, v), first in owned.items():
            if v != version:
                continue
            theirs = by_file.get((first, display(rel)), [])
            if theirs:
                invalid += documents(rel)
                findings += [_at(f, version) for f in theirs]
            else:
                valid += documents(rel)
        r = run.version
        counts = VersionResult(version, r.valid + valid, r.invalid + invalid, r.errors, r.skipped)
        out.append(Run(counts, tuple(findings), run.seconds))
    return out


def _at(f: Finding, version: str) -> Finding:
    return Finding(f.file, f.kind, f.name, f.pointer, f.message, f.tool, f.severity, (version,))
