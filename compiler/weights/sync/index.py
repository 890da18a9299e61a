"""The store's index: anchors, deltas, manifests and files, and the one index over them.

A generation is a whole model directory (``modeldir``): its safetensors weights and
every other file beside them. Layout (relative paths; the same keys work in an object
store)::

    index.json                      written last and atomically
    manifests/<G>.json              the weights manifest of generation G
    deltas/<F>-<G>.delta            the weights, from the previous published generation F;
                                    for the latest G also merged deltas from older F
    anchors/<G>/<file>...           a full copy of generation G's weights
    files/<sha256>                  every other file, by content: stored once, whatever
                                    its name and however many generations hold it
    patches/<sha256>-<sha256>.zst   a byte patch between two versions of such a file

The index maps each generation to its directory digest and size, its weights (their
checkpoint digest and file names), its other files (name, size, sha256, and a patch
from the previous generation's file of that name where one is smaller), its manifest,
delta and anchor, and for the latest its merged deltas (``merged``: optional, each from
an older generation straight to it). Every path, name and number in it is checked before
it is used, and each generation's digest is recomputed from what it lists: the index
comes over the network.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any, Protocol

from compiler.weights.manifest import MAX_CHUNK, MIN_CHUNK
from compiler.weights.safetensors_io import INDEX_NAME
from compiler.weights.sync.errors import StoreError
from compiler.weights.sync.modeldir import (
    MAX_FILES,
    ModelDirError,
    check_name,
    check_tree,
    dir_digest,
)

FORMAT = "standbyc-store"
VERSION = 2
INDEX = "index.json"
INDEX_CAP = 64 << 20
MAX_GENERATIONS = 100_000
MAX_GENERATION = 10**15
MAX_MERGED = 4096  # merged deltas into one generation
_HEX = "[0-9a-f]{64}"
_SEGMENT = r"(?!\.\.?(?:/|$))[A-Za-z0-9._-]+"  # not '.' or '..'
_PATH = re.compile(
    rf"(?:anchors|deltas|manifests)/{_SEGMENT}(?:/{_SEGMENT})?"
    rf"|files/{_HEX}|patches/{_HEX}-{_HEX}\.zst"
)
_NAME = re.compile(_SEGMENT)
_HEX32 = re.compile(r"[0-9a-f]{32}")
_HEX64 = re.compile(_HEX)


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
    base_digest: str  # weights (checkpoint) digests
    target_digest: str

    def to_json(self) -> dict[str, Any]:
        return {
            "from": self.base,
            **self.file.to_json(),
            "base_digest": self.base_digest,
            "target_digest": self.target_digest,
        }


@dataclass(frozen=True)
class Patch:
    base_sha256: str  # the content it applies to
    file: StoredFile


@dataclass(frozen=True)
class PlainFile:
    """A file of the model directory that is not its weights."""

    name: str
    size: int
    sha256: str
    patch: Patch | None = None  # from the previous generation's file of this name

    @property
    def stored(self) -> StoredFile:
        return StoredFile(blob_path(self.sha256), self.size, self.sha256)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.name, "size": self.size, "sha256": self.sha256}
        if self.patch is not None:
            out["patch"] = {"from": self.patch.base_sha256, **self.patch.file.to_json()}
        return out


def blob_path(sha256: str) -> str:
    return f"files/{sha256}"


def patch_path(base: str, target: str) -> str:
    return f"patches/{base}-{target}.zst"


@dataclass(frozen=True)
class WeightsInfo:
    digest: str  # the checkpoint digest (docs/delta-format.md)
    names: tuple[str, ...]  # the index first when sharded, then the shards
    size: int

    @property
    def sharded(self) -> bool:
        return self.names[0] == INDEX_NAME


@dataclass(frozen=True)
class Generation:
    number: int
    digest: str  # the model directory's digest (modeldir.dir_digest)
    size: int  # bytes of every file in the directory
    weights: WeightsInfo
    files: tuple[PlainFile, ...]
    manifest: StoredFile
    delta: Delta | None
    anchor: tuple[StoredFile, ...]  # empty: no anchor
    merged: tuple[Delta, ...] = ()  # straight from older generations (docs/weight-sync.md)

    @property
    def anchor_size(self) -> int:
        return sum(f.size for f in self.anchor)

    def stored(self) -> list[StoredFile]:
        """Every store file this generation names."""
        out = [self.manifest, *([self.delta.file] if self.delta else []), *self.anchor]
        out += [m.file for m in self.merged]
        for f in self.files:
            out.append(f.stored)
            if f.patch is not None:
                out.append(f.patch.file)
        return out

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "generation": self.number,
            "digest": self.digest,
            "size": self.size,
            "weights": {
                "digest": self.weights.digest,
                "files": list(self.weights.names),
                "size": self.weights.size,
            },
            "files": [f.to_json() for f in self.files],
            "manifest": self.manifest.to_json(),
            "delta": None if self.delta is None else self.delta.to_json(),
            "anchor": [f.to_json() for f in self.anchor] or None,
        }
        if self.merged:  # omitted when empty: indexes stay as they were without merges
            out["merged"] = [m.to_json() for m in self.merged]
        return out


@dataclass(frozen=True)
class Index:
    chunk_size: int
    generations: dict[int, Generation]

    @property
    def latest(self) -> int:
        return max(self.generations)

    def by_digest(self, digest: str | None) -> int | None:
        """The newest generation whose whole directory has this digest."""
        found = [g for g, gen in self.generations.items() if gen.digest == digest]
        return max(found) if found else None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "version": VERSION,
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
    if not isinstance(v, str) or not pattern.fullmatch(v):
        raise StoreError(f"{where}: {v!r} is not a valid {what}")
    return v


def _list(v: object, where: str, cap: int = MAX_FILES) -> list[Any]:
    if not isinstance(v, list) or len(v) > cap:
        raise StoreError(f"{where}: expected a list of at most {cap} entries")
    return v


def _file(v: object, where: str, *, named: bool = False) -> StoredFile:
    d = _obj(v, where)
    return StoredFile(
        path=_str(d.get("path"), _PATH, f"{where}.path", "store path"),
        size=_int(d.get("size"), f"{where}.size"),
        sha256=_str(d.get("sha256"), _HEX64, f"{where}.sha256", "sha256"),
        name=_str(d.get("name"), _NAME, f"{where}.name", "file name") if named else "",
    )


def _plain(v: object, where: str) -> PlainFile:
    d = _obj(v, where)
    try:
        name = check_name(d.get("name"), f"{where}.name")
    except ModelDirError as exc:
        raise StoreError(str(exc)) from None
    sha = _str(d.get("sha256"), _HEX64, f"{where}.sha256", "sha256")
    patch = None
    if d.get("patch") is not None:
        pd = _obj(d["patch"], f"{where}.patch")
        base = _str(pd.get("from"), _HEX64, f"{where}.patch.from", "sha256")
        patch = Patch(base, _file(pd, f"{where}.patch"))
        if base == sha or patch.file.path != patch_path(base, sha):
            raise StoreError(f"{where}.patch.path: must be {patch_path(base, sha)}")
    return PlainFile(name, _int(d.get("size"), f"{where}.size"), sha, patch)


def _weights(v: object, where: str) -> WeightsInfo:
    d = _obj(v, where)
    names = tuple(
        _str(n, _NAME, f"{where}.files[{i}]", "weights file name")
        for i, n in enumerate(_list(d.get("files"), f"{where}.files"))
    )
    if not names:
        raise StoreError(f"{where}.files: empty")
    return WeightsInfo(
        digest=_str(d.get("digest"), _HEX32, f"{where}.digest", "digest"),
        names=names,
        size=_int(d.get("size"), f"{where}.size"),
    )


def _delta(v: object, number: int, where: str) -> Delta:
    dd = _obj(v, where)
    delta = Delta(
        base=_int(dd.get("from"), f"{where}.from", MAX_GENERATION),
        file=_file(dd, where),
        base_digest=_str(dd.get("base_digest"), _HEX32, f"{where}.base_digest", "digest"),
        target_digest=_str(dd.get("target_digest"), _HEX32, f"{where}.target_digest", "digest"),
    )
    if delta.base >= number:
        raise StoreError(f"{where}.from: {delta.base} is not before {number}")
    return delta


def _merged(v: object, number: int, delta: Delta | None, where: str) -> tuple[Delta, ...]:
    """Merged deltas: each from its own older generation, at ``deltas/<F>-<G>.delta``."""
    if v is None:
        return ()
    out = tuple(
        _delta(m, number, f"{where}[{i}]") for i, m in enumerate(_list(v, where, MAX_MERGED))
    )
    seen = {delta.base} if delta is not None else set()
    for i, m in enumerate(out):
        if m.base in seen:
            raise StoreError(f"{where}[{i}].from: a second delta from generation {m.base}")
        seen.add(m.base)
        if m.file.path != f"deltas/{m.base}-{number}.delta":
            raise StoreError(f"{where}[{i}].path: must be deltas/{m.base}-{number}.delta")
    return out


def _generation(v: object, where: str) -> Generation:
    d = _obj(v, where)
    number = _int(d.get("generation"), f"{where}.generation", MAX_GENERATION)
    weights = _weights(d.get("weights"), f"{where}.weights")
    listed = _list(d.get("files"), where, INDEX_CAP)
    if len(weights.names) + len(listed) > MAX_FILES:
        # The standby reads its own directory with the same cap (modeldir.scan): past it,
        # it would sync once, then never recognise the directory again.
        raise StoreError(
            f"{where}: {len(weights.names) + len(listed)} files; a model directory holds at "
            f"most {MAX_FILES} (publish refuses more, and so does a standby reading its own)"
        )
    files = tuple(_plain(f, f"{where}.files[{i}]") for i, f in enumerate(listed))
    try:
        check_tree([*weights.names, *(f.name for f in files)], where)
    except ModelDirError as exc:
        raise StoreError(str(exc)) from None
    anchor = tuple(
        _file(f, f"{where}.anchor[{i}]", named=True)
        for i, f in enumerate(_list(d.get("anchor") or [], f"{where}.anchor"))
    )
    if anchor and sorted(f.name for f in anchor) != sorted(weights.names):
        raise StoreError(f"{where}.anchor: must hold exactly the weights files")
    delta = None if d.get("delta") is None else _delta(d["delta"], number, f"{where}.delta")
    merged = _merged(d.get("merged"), number, delta, f"{where}.merged")
    gen = Generation(
        number=number,
        digest=_str(d.get("digest"), _HEX32, f"{where}.digest", "digest"),
        size=_int(d.get("size"), f"{where}.size"),
        weights=weights,
        files=files,
        manifest=_file(d.get("manifest"), f"{where}.manifest"),
        delta=delta,
        anchor=anchor,
        merged=merged,
    )
    for what, dl in [("delta", delta), *((f"merged[{i}]", m) for i, m in enumerate(merged))]:
        if dl is not None and dl.target_digest != weights.digest:
            raise StoreError(f"{where}.{what}.target_digest: differs from the weights' digest")
    expect = dir_digest(weights.digest, weights.names, ((f.name, f.size, f.sha256) for f in files))
    if gen.digest != expect:
        raise StoreError(f"{where}.digest: {gen.digest}, but what it lists has {expect}")
    if gen.size != weights.size + sum(f.size for f in files):
        raise StoreError(f"{where}.size: not the sum of its files' sizes")
    return gen


def parse_index(raw: bytes, where: str) -> Index:
    """Read and check an index; every problem is a StoreError naming ``where``."""
    if len(raw) > INDEX_CAP:
        raise StoreError(f"{where}: larger than {INDEX_CAP} bytes")
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise StoreError(f"{where}: not valid JSON: {exc}") from None
    d = _obj(doc, where)
    if d.get("format") != FORMAT:
        raise StoreError(f"{where}: not a {FORMAT} index")
    if d.get("version") != VERSION:
        raise StoreError(
            f"{where}: a {FORMAT} index version {d.get('version')!r}; this standbyc reads "
            f"version {VERSION} (whole model directories): publish into a new store"
        )
    chunk = _int(d.get("chunk_size"), f"{where}: chunk_size", MAX_CHUNK)
    if chunk < MIN_CHUNK or chunk & (chunk - 1):
        raise StoreError(f"{where}: chunk_size {chunk} must be a power of two in [4 KiB, 64 MiB]")
    entries = _list(d.get("generations"), f"{where}: generations", MAX_GENERATIONS)
    if not entries:
        raise StoreError(f"{where}: generations must be a non-empty list")
    gens: dict[int, Generation] = {}
    for i, e in enumerate(entries):
        gen = _generation(e, f"{where}: generations[{i}]")
        if gen.number in gens:
            raise StoreError(f"{where}: generation {gen.number} is listed twice")
        gens[gen.number] = gen
    for gen in gens.values():
        for dl in [*([gen.delta] if gen.delta else []), *gen.merged]:
            base = gens.get(dl.base)
            if base is not None and base.weights.digest != dl.base_digest:
                raise StoreError(
                    f"{where}: the delta {dl.file.path} of generation {gen.number} is for "
                    f"another base than generation {base.number}"
                )
    index = Index(chunk, gens)
    if d.get("latest") != index.latest:
        raise StoreError(
            f"{where}: latest is {d.get('latest')!r}, the newest listed is {index.latest}"
        )
    return index


# --- reading -----------------------------------------------------------------------------


class KeyAbsent(Exception):
    """The store holds no file at this key."""


class IndexSource(Protocol):
    """Where a store's files are read from: a directory (``stores.directory``) or a
    server (``fetch.Fetcher``, over HTTP or signed S3)."""

    def url(self, key: str) -> str:
        """Where the key is, as its errors name it."""

    def read(self, key: str, cap: int) -> bytes:
        """The key's bytes (at most about ``cap``); KeyAbsent if the store has none."""


def read_index(source: IndexSource) -> Index | None:
    """The store's index, checked; None when it has none (what that means is the
    caller's: a new store to a publish, nothing published to a sync)."""
    try:
        raw = source.read(INDEX, INDEX_CAP)
    except KeyAbsent:
        return None
    return parse_index(raw, source.url(INDEX))
