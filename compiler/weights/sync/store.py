"""The store: a directory of anchors, deltas and manifests, and the one index over them.

Layout (relative paths; the same keys work in an object store)::

    index.json                      written last and atomically
    manifests/<G>.json              the checkpoint manifest of generation G
    deltas/<F>-<G>.delta            from the previous published generation F to G
    anchors/<G>/<file>...           a full copy of generation G

The index maps each generation to its checkpoint digest and size, its manifest, its
delta (base and target digests, size, sha256) and its anchor, if any. Every path and
number in it is checked before it is used: the index comes over the network.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from compiler.weights.sync.errors import StoreError

FORMAT = "standbyc-store"
VERSION = 1
INDEX = "index.json"
INDEX_CAP = 16 << 20
MAX_GENERATIONS = 100_000
MAX_FILES = 100_000
MAX_GENERATION = 10**15
_PATH = re.compile(r"^(anchors|deltas|manifests)/[A-Za-z0-9._-]+(/[A-Za-z0-9._-]+)?$")
_NAME = re.compile(r"^[A-Za-z0-9._-]+$")
_HEX32 = re.compile(r"^[0-9a-f]{32}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


@dataclass(frozen=True)
class StoredFile:
    """One file of the store: where it is, how large, and its sha256."""

    path: str
    size: int
    sha256: str
    name: str = ""  # for anchor files: the file's name inside the checkpoint

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "size": self.size, "sha256": self.sha256}
        if self.name:
            out["name"] = self.name
        return out


@dataclass(frozen=True)
class Delta:
    base: int  # the generation this delta applies to
    file: StoredFile
    base_digest: str
    target_digest: str


@dataclass(frozen=True)
class Generation:
    number: int
    digest: str  # checkpoint digest (xxh3-128, docs/delta-format.md)
    size: int  # checkpoint bytes
    manifest: StoredFile
    delta: Delta | None
    anchor: tuple[StoredFile, ...]  # empty: no anchor

    @property
    def anchor_size(self) -> int:
        return sum(f.size for f in self.anchor)

    def files(self) -> list[StoredFile]:
        return [self.manifest, *([self.delta.file] if self.delta else []), *self.anchor]

    def to_json(self) -> dict[str, Any]:
        return {
            "generation": self.number,
            "digest": self.digest,
            "size": self.size,
            "manifest": self.manifest.to_json(),
            "delta": None
            if self.delta is None
            else {
                "from": self.delta.base,
                **self.delta.file.to_json(),
                "base_digest": self.delta.base_digest,
                "target_digest": self.delta.target_digest,
            },
            "anchor": [f.to_json() for f in self.anchor] or None,
        }


@dataclass(frozen=True)
class Layout:
    """A store holds one checkpoint layout: one file (with its name) or a directory."""

    file: str | None  # the file's name for a one-file checkpoint; None for a directory

    def to_json(self) -> dict[str, Any]:
        if self.file is None:
            return {"type": "directory"}
        return {"type": "file", "file": self.file}

    def describe(self) -> str:
        return f"one file {self.file!r}" if self.file else "a directory of shards"


@dataclass(frozen=True)
class Index:
    layout: Layout
    chunk_size: int
    generations: dict[int, Generation]

    @property
    def latest(self) -> int:
        return max(self.generations)

    def by_digest(self, digest: str) -> int | None:
        """The newest generation with this checkpoint digest."""
        found = [g for g, gen in self.generations.items() if gen.digest == digest]
        return max(found) if found else None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
            "layout": self.layout.to_json(),
            "chunk_size": self.chunk_size,
            "latest": self.latest,
            "generations": [self.generations[g].to_json() for g in sorted(self.generations)],
        }

    def dumps(self) -> bytes:
        return (json.dumps(self.to_json(), indent=1, sort_keys=True) + "\n").encode()


# --- parsing -----------------------------------------------------------------------------


def _obj(v: object, where: str) -> dict[str, Any]:
    if not isinstance(v, dict):
        raise StoreError(f"{where}: expected an object")
    return v


def _int(v: object, where: str, hi: int = 1 << 62) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= hi:
        raise StoreError(f"{where}: expected an integer from 0 to {hi}")
    return v


def _str(v: object, pattern: re.Pattern[str], where: str, what: str) -> str:
    if not isinstance(v, str) or not pattern.match(v) or ".." in v.split("/"):
        raise StoreError(f"{where}: {v!r} is not a valid {what}")
    return v


def _file(v: object, where: str, *, named: bool = False) -> StoredFile:
    d = _obj(v, where)
    return StoredFile(
        path=_str(d.get("path"), _PATH, f"{where}.path", "store path"),
        size=_int(d.get("size"), f"{where}.size"),
        sha256=_str(d.get("sha256"), _HEX64, f"{where}.sha256", "sha256"),
        name=_str(d.get("name"), _NAME, f"{where}.name", "file name") if named else "",
    )


def _generation(v: object, where: str) -> Generation:
    d = _obj(v, where)
    number = _int(d.get("generation"), f"{where}.generation", MAX_GENERATION)
    delta = None
    if d.get("delta") is not None:
        dd = _obj(d["delta"], f"{where}.delta")
        delta = Delta(
            base=_int(dd.get("from"), f"{where}.delta.from", MAX_GENERATION),
            file=_file(dd, f"{where}.delta"),
            base_digest=_str(dd.get("base_digest"), _HEX32, f"{where}.delta", "digest"),
            target_digest=_str(dd.get("target_digest"), _HEX32, f"{where}.delta", "digest"),
        )
        if delta.base >= number:
            raise StoreError(f"{where}.delta.from: {delta.base} is not before {number}")
    anchor = d.get("anchor") or []
    if not isinstance(anchor, list) or len(anchor) > MAX_FILES:
        raise StoreError(f"{where}.anchor: expected a list of files")
    gen = Generation(
        number=number,
        digest=_str(d.get("digest"), _HEX32, f"{where}.digest", "digest"),
        size=_int(d.get("size"), f"{where}.size"),
        manifest=_file(d.get("manifest"), f"{where}.manifest"),
        delta=delta,
        anchor=tuple(_file(f, f"{where}.anchor[{i}]", named=True) for i, f in enumerate(anchor)),
    )
    if delta is not None and delta.target_digest != gen.digest:
        raise StoreError(f"{where}.delta.target_digest: differs from the generation's digest")
    return gen


def _layout(lay: dict[str, Any], where: str) -> Layout:
    if lay.get("type") == "directory":
        return Layout(None)
    if lay.get("type") == "file":
        return Layout(_str(lay.get("file"), _NAME, f"{where}: layout.file", "file name"))
    raise StoreError(f"{where}: layout.type must be 'file' or 'directory'")


def parse_index(raw: bytes, where: str) -> Index:
    """Read and check an index; every problem is a StoreError naming ``where``."""
    if len(raw) > INDEX_CAP:
        raise StoreError(f"{where}: larger than {INDEX_CAP} bytes")
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise StoreError(f"{where}: not valid JSON: {exc}") from None
    d = _obj(doc, where)
    if d.get("format") != FORMAT or d.get("version") != VERSION:
        raise StoreError(f"{where}: not a {FORMAT} index version {VERSION}")
    layout = _layout(_obj(d.get("layout"), f"{where}: layout"), where)
    entries = d.get("generations")
    if not isinstance(entries, list) or not entries or len(entries) > MAX_GENERATIONS:
        raise StoreError(f"{where}: generations must be a non-empty list")
    gens: dict[int, Generation] = {}
    for i, e in enumerate(entries):
        gen = _generation(e, f"{where}: generations[{i}]")
        if gen.number in gens:
            raise StoreError(f"{where}: generation {gen.number} is listed twice")
        gens[gen.number] = gen
    for gen in gens.values():
        if gen.delta is not None:
            base = gens.get(gen.delta.base)
            if base is not None and base.digest != gen.delta.base_digest:
                raise StoreError(
                    f"{where}: the delta of generation {gen.number} is for another base "
                    f"than generation {base.number}"
                )
    index = Index(layout, _int(d.get("chunk_size"), f"{where}: chunk_size"), gens)
    if d.get("latest") != index.latest:
        raise StoreError(
            f"{where}: latest is {d.get('latest')!r}, the newest listed is {index.latest}"
        )
    return index


# --- routes ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Route:
    """How to reach a generation: an optional anchor to download, then deltas in order."""

    target: int
    start: int | None  # the generation the deltas start from (the anchor's, or the current)
    anchor: Generation | None
    deltas: tuple[Generation, ...]  # generations whose deltas are applied, oldest first
    reason: str = ""

    @property
    def nbytes(self) -> int:
        anchor = self.anchor.anchor_size if self.anchor else 0
        return anchor + sum(g.delta.file.size for g in self.deltas if g.delta)

    def describe(self) -> str:
        steps = " -> ".join(str(g.number) for g in self.deltas)
        chain = f"{len(self.deltas)} delta(s) {self.start} -> {steps}" if self.deltas else ""
        if self.anchor is None:
            return f"chain of {chain}"
        head = f"anchor {self.anchor.number}"
        return f"{head} + {chain}" if chain else head


def _walk_back(index: Index, target: int) -> list[Generation]:
    """The target, then each generation its delta starts from, while the index has it."""
    out = [index.generations[target]]
    while (d := out[-1].delta) is not None and d.base in index.generations:
        out.append(index.generations[d.base])
        if len(out) > len(index.generations):
            raise StoreError(f"{INDEX}: the deltas before generation {target} form a loop")
    return out


def plan_route(index: Index, current: int | None, target: int) -> Route:
    """The fewest bytes to download to reach ``target`` from ``current`` (None: nothing)."""
    if target not in index.generations:
        raise StoreError(
            f"generation {target} is not published in the store (latest is {index.latest})"
        )
    walk = _walk_back(index, target)
    candidates: list[Route] = []
    for i, gen in enumerate(walk):
        deltas = tuple(reversed(walk[:i]))
        if current is not None and gen.number == current:
            candidates.append(Route(target, current, None, deltas))
        if gen.anchor:
            candidates.append(Route(target, gen.number, gen, deltas))
    if not candidates:
        raise StoreError(
            f"generation {target} cannot be reached: no anchor and no delta chain from the "
            f"current generation {current}"
        )
    best = min(candidates, key=lambda r: (r.nbytes, len(r.deltas)))
    others = sorted((r for r in candidates if r is not best), key=lambda r: r.nbytes)
    why = f"{best.describe()}: {best.nbytes} bytes"
    if others:
        why += f", cheapest; next best {others[0].describe()}: {others[0].nbytes} bytes"
    return Route(best.target, best.start, best.anchor, best.deltas, why)
