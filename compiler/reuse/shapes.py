"""One kubeconform pass per schema, not per Kubernetes version.

Most kinds' schemas do not change between the versions of the matrix but for their
descriptions (a CRD's never does; ConfigMap's, ServiceAccount's, NetworkPolicy's hardly),
and a description takes no part in validation. A manifest whose schema at a later version
has the same *shape* (the schema without its descriptions, and without the
``x-kubernetes-*`` annotations the API server reads, such as ``x-kubernetes-list-type``:
they are no JSON Schema keywords, and kubeconform's validator ignores them) as at an earlier
one gets that earlier version's result: same document, same schema, same verdict.

Most other changes only add fields (a Job's PodSpec grows each release): a later schema
that *extends* an earlier one, the same but for properties added to objects that forbid
unknown ones (as the strict schemas' objects do) and new definitions, accepts every
document the earlier one accepts. A manifest that passed at the earlier version passes at
the later one, and takes that pass; one that failed is validated at the later version too
(it may use a field that version added). Only a schema that changed otherwise (a removed
field, a new required one) is validated again for everything.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compiler.gate.kubeconform import Run
from compiler.gate.report import Finding, VersionResult
from compiler.gate.schemas import SchemaDir
from compiler.reuse import store

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
def _loaded(path: Path, content: str) -> Any:
    """The schema at ``path`` without its descriptions (``content``: the digest of its
    bytes, so a schema changed in place is read again)."""
    return _shape(json.loads(path.read_bytes()))


@functools.cache
def shape(path: Path, content: str) -> str:
    """The digest of ``_loaded(path, content)``, remembered in the cache (under the
    schema's bytes and the code that shapes them)."""
    kept = store.Store("gate")
    k = store.key("schema-shape", store.code_digest(), content)
    if (seen := kept.get(k)) is not None:
        return seen.decode()
    text = json.dumps(_loaded(path, content), sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(text.encode()).hexdigest()
    kept.put(k, digest.encode())
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


@dataclass(frozen=True)
class Owners:
    """Which (manifest, version) pairs take another version's result instead of a run."""

    # -> the earlier version whose schema has the same shape: its verdict, pass or fail
    same: dict[tuple[str, str], str] = field(default_factory=dict)
    # -> the earlier version whose schema this one extends: its pass (a failure runs again)
    extended: dict[tuple[str, str], str] = field(default_factory=dict)

    def __contains__(self, pair: tuple[str, str]) -> bool:
        return pair in self.same or pair in self.extended


def owners(
    sd: SchemaDir,
    versions: Sequence[str],
    manifests: Sequence[str],
    documents: Callable[[str], list[Any] | str],
) -> Owners:
    """Every pair whose schema at that version has the shape it had at an earlier one, or
    extends the schema of an earlier one that is validated. A manifest of several
    documents, one that cannot be read, or one without a schema is validated at every
    version. The kind is read from the parsed document, never matched in the text."""
    out = Owners()
    by_kind: dict[tuple[str, str], dict[str, tuple[str, str]] | None] = {}
    for rel in manifests:
        docs = documents(rel)
        if isinstance(docs, str) or len(docs) != 1 or not isinstance(docs[0], dict):
            continue
        api_version, kind_name = docs[0].get("apiVersion"), docs[0].get("kind")
        if not isinstance(api_version, str) or not isinstance(kind_name, str):
            continue
        kind = (api_version, kind_name)
        if kind not in by_kind:
            by_kind[kind] = _firsts(sd, versions, *kind)
        for v, (how, first) in (by_kind[kind] or {}).items():
            if how == "same" and first != v:
                out.same[(rel, v)] = first
            elif how == "extends":
                out.extended[(rel, v)] = first
    return out


def _firsts(
    sd: SchemaDir, versions: Sequence[str], api_version: str, kind: str
) -> dict[str, tuple[str, str]] | None:
    """Version -> ("same", the first version whose schema for this kind has the same
    shape) or ("extends", the validated version whose schema it extends); None when a
    version has no schema for it (kubeconform reports that at each)."""
    seen: dict[str, str] = {}  # shape -> the first version with it
    out: dict[str, tuple[str, str]] = {}
    base: tuple[str, Path, str] | None = None  # the last version validated
    for v in versions:
        path = schema_file(sd, v, api_version, kind)
        if path is None:
            return None
        content = store.content_digest(path)
        digest = shape(path, content)
        if digest in seen:
            out[v] = ("same", seen[digest])
            continue
        seen[digest] = v
        if base is not None and _extends_at(base[1], base[2], path, content):
            out[v] = ("extends", base[0])
        else:
            out[v], base = ("same", v), (v, path, content)
    return out


@functools.cache
def _extends_at(old: Path, old_content: str, new: Path, content: str) -> bool:
    """``extends`` of the two schema files, remembered in the cache under their bytes and
    the code that compares them (reading and shaping two PodSpec schemas costs more than
    the rest of a warm gate run)."""
    kept = store.Store("gate")
    k = store.key("schema-extends", store.code_digest(), old_content, content)
    if (seen := kept.get(k)) is not None:
        return seen == b"1"
    verdict = extends(_loaded(old, old_content), _loaded(new, content))
    kept.put(k, b"1" if verdict else b"0")
    return verdict


# Where a later schema may hold more than an earlier one and still accept all it accepted.
_SUBSCHEMAS = ("items", "additionalProperties")  # (when they are schemas, not booleans)
_EACH = ("allOf", "anyOf")  # all of / any of: a branch that accepts more cannot reject
_DEFINITIONS = ("$defs", "definitions")


def extends(old: Any, new: Any) -> bool:
    """Whether schema ``new`` accepts every document ``old`` accepts because it is ``old``
    with properties added where ``old`` allows no others (``additionalProperties: false``
    and no ``patternProperties``) and with definitions added (or removed where ``new`` no
    longer refers to them). Anything else (a type, ``required``, an enum, a reference,
    ``oneOf``, ``not``) must be equal, and so must every definition such an equal part
    refers to, directly or not: a definition that accepts more under ``oneOf`` or ``not``
    may make the whole accept less."""
    pinned: set[str] = set()
    return _extends(old, new, pinned) and _pinned_equal(old, new, pinned)


def _extends(old: Any, new: Any, pinned: set[str]) -> bool:
    if type(old) is not type(new):
        return False
    if not isinstance(old, dict):
        return _equal(old, new, pinned)
    if set(old) != set(new):
        return False
    return all(_field_extends(key, old, new, pinned) for key in old)


def _field_extends(key: str, old: dict[str, Any], new: dict[str, Any], pinned: set[str]) -> bool:
    was, now = old[key], new[key]
    if key == "$ref":
        return bool(was == now)  # the definition it names is compared where it is defined
    if key in ("properties", *_DEFINITIONS) and isinstance(was, dict) and isinstance(now, dict):
        return _members_extend(key, old, new, pinned)
    if key in _SUBSCHEMAS and isinstance(was, dict):
        return _extends(was, now, pinned)
    if key in _EACH and isinstance(was, list) and isinstance(now, list):
        return len(was) == len(now) and all(
            _extends(a, b, pinned) for a, b in zip(was, now, strict=True)
        )
    return _equal(was, now, pinned)


def _members_extend(key: str, old: dict[str, Any], new: dict[str, Any], pinned: set[str]) -> bool:
    """``properties`` or definitions: the members of both extend, and added ones are
    allowed (properties only where nothing else was)."""
    was, now = old[key], new[key]
    gone, added = was.keys() - now.keys(), now.keys() - was.keys()
    if key == "properties" and (
        gone
        or (added and (old.get("additionalProperties") is not False or "patternProperties" in old))
    ):
        return False  # a removed field, or one a document valid before may hold with any value
    if key in _DEFINITIONS and gone:
        text = json.dumps(new)  # once, not once per removed definition
        if any(f'"#/{key}/{name}"' in text for name in gone):
            return False
    return all(_extends(was[name], now[name], pinned) for name in was.keys() & now.keys())


def _equal(was: Any, now: Any, pinned: set[str]) -> bool:
    """``was == now``; the definitions an equal part refers to must stay equal too."""
    if was != now:
        return False
    pinned.update(_refs(was))
    return True


def _refs(node: Any) -> set[str]:
    if isinstance(node, dict):
        found = {node["$ref"]} if isinstance(node.get("$ref"), str) else set()
        return found.union(*(_refs(v) for k, v in node.items() if k not in _DATA))
    if isinstance(node, list):
        return set().union(*(_refs(v) for v in node))
    return set()


def _pinned_equal(old: Any, new: Any, pinned: set[str]) -> bool:
    """Whether every definition in ``pinned``, and every one they refer to, is the same
    in both schemas (a reference that is not to a local definition: not shown, False)."""
    todo, seen = list(pinned), set()
    while todo:
        ref = todo.pop()
        if ref in seen:
            continue
        seen.add(ref)
        parts = ref.split("/")
        if len(parts) != 3 or parts[0] != "#" or parts[1] not in _DEFINITIONS:
            return False
        a = (old.get(parts[1]) or {}).get(parts[2]) if isinstance(old, dict) else None
        b = (new.get(parts[1]) or {}).get(parts[2]) if isinstance(new, dict) else None
        if a is None or a != b:
            return False
        todo += _refs(a)
    return True


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
