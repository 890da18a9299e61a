"""Publish a generation into a store directory.

For generation G published after F (the latest so far) this writes
``manifests/G.json``, ``deltas/F-G.delta`` (diffed against F's anchor, which the store
always keeps for its latest generation) and ``anchors/G/``, then ``index.json`` last and
atomically, then removes what the new index no longer names. A reader therefore sees
either the old index with all its files or the new one with all of its own.

Anchors kept: every ``anchor_every``-th generation, the oldest generation in the index
(so every listed generation can be reached from an anchor by deltas) and the latest (so
the next publish can diff against it). Generations older than the last ``keep`` are
dropped, except those the remaining ones need.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from compiler.fsutil import exclusive, fsync_path
from compiler.weights import DEFAULT_CHUNK
from compiler.weights.diff import diff
from compiler.weights.manifest import Progress, build_manifest
from compiler.weights.safetensors_io import INDEX_NAME, Checkpoint
from compiler.weights.sync.errors import StoreError, SyncBusy
from compiler.weights.sync.store import (
    INDEX,
    Delta,
    Generation,
    Index,
    Layout,
    StoredFile,
    parse_index,
)

TMP_MARK = ".standbyc-tmp-"
ONE_FILE = "model.safetensors"


@dataclass
class PublishStats:
    generation: int = 0
    digest: str = ""
    already: bool = False  # the generation was published before, with the same digest
    checkpoint_bytes: int = 0
    delta_bytes: int = 0
    delta_from: int | None = None
    anchor_bytes: int = 0
    pruned: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "digest": self.digest,
            "already_published": self.already,
            "checkpoint_bytes": self.checkpoint_bytes,
            "delta_from": self.delta_from,
            "delta_bytes": self.delta_bytes,
            "delta_ratio": self.delta_bytes / self.checkpoint_bytes
            if self.checkpoint_bytes
            else 0.0,
            "anchor_bytes": self.anchor_bytes,
            "pruned": self.pruned,
            "seconds": round(self.seconds, 4),
        }


def _tmp(path: Path) -> Path:
    return path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}")


def _write_atomic(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = _tmp(path)
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)
    fsync_path(path.parent)


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(8 << 20):
            h.update(block)
    return h.hexdigest()


def _stored(store: Path, rel: str, name: str = "") -> StoredFile:
    path = store / rel
    return StoredFile(rel, path.stat().st_size, sha256_file(path), name)


def read_index(store: Path) -> Index | None:
    path = store / INDEX
    if not path.exists():
        return None
    return parse_index(path.read_bytes(), str(path))


def checkpoint_files(path: Path) -> list[Path]:
    """The files of a checkpoint: the file itself, or the index and shards of a directory."""
    if path.is_file():
        return [path]
    ckpt = Checkpoint(path)
    try:
        files = [f.path for f in ckpt.files]
    finally:
        ckpt.close()
    index = path / INDEX_NAME
    return [index, *files] if index.is_file() else files


def anchor_path(store: Path, layout: Layout, generation: int) -> Path:
    """Where a generation's anchor is, as a checkpoint path the delta library reads."""
    base = store / "anchors" / str(generation)
    return base / layout.file if layout.file else base


def _write_anchor(new: Path, store: Path, generation: int) -> tuple[StoredFile, ...]:
    final = store / "anchors" / str(generation)
    tmp = _tmp(final)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    for src in checkpoint_files(new):
        name = src.name if new.is_dir() else ONE_FILE
        shutil.copyfile(src, tmp / name)  # copy_file_range where the kernel offers it
        fsync_path(tmp / name)
    fsync_path(tmp)
    shutil.rmtree(final, ignore_errors=True)
    tmp.replace(final)
    fsync_path(final.parent)
    rel = f"anchors/{generation}"
    return tuple(
        _stored(store, f"{rel}/{p.name}", p.name) for p in sorted(final.iterdir(), key=str)
    )


def _anchors_to_keep(gens: dict[int, Generation], anchor_every: int) -> set[int]:
    ordered = sorted(gens)
    return {g for g in ordered if g % anchor_every == 0} | {ordered[0], ordered[-1]}


def _prune(gens: dict[int, Generation], keep: int, anchor_every: int) -> dict[int, Generation]:
    """Drop generations older than the last ``keep``, but keep an anchored start for the
    oldest kept one; drop anchors that are no longer needed."""
    ordered = sorted(gens)
    window = ordered[-keep:]
    start = window[0]
    # Walk back to an anchored generation: the oldest listed one always is.
    while not gens[start].anchor:
        delta = gens[start].delta
        prev = delta.base if delta is not None else None
        if prev is None or prev not in gens:
            raise StoreError(f"generation {start} cannot be reached from any anchor")
        start = prev
    kept = {g: gens[g] for g in ordered if g >= start}
    anchors = _anchors_to_keep(kept, anchor_every)
    return {g: gen if g in anchors else replace(gen, anchor=()) for g, gen in kept.items()}


def _remove_unlisted(store: Path, index: Index) -> list[str]:
    listed = {f.path for gen in index.generations.values() for f in gen.files()}
    removed: list[str] = []
    for top in ("anchors", "deltas", "manifests"):
        root = store / top
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*"), key=str, reverse=True):
            rel = path.relative_to(store).as_posix()
            if path.is_file() and rel not in listed:
                path.unlink()
                removed.append(rel)
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()
    return sorted(removed)


def _clean_leftovers(store: Path) -> None:
    """Temp files and directories of a publish that was killed (we hold the lock)."""
    for path in sorted(store.rglob(f"*{TMP_MARK}*"), key=str, reverse=True):
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)


def publish(
    new: Path,
    store: Path,
    generation: int,
    *,
    anchor_every: int = 10,
    keep: int = 20,
    chunk: int = DEFAULT_CHUNK,
    progress: Progress | None = None,
) -> PublishStats:
    """Publish checkpoint ``new`` (a file or a sharded directory) as ``generation``."""
    if anchor_every < 1 or keep < 1:
        raise StoreError("--anchor-every and --keep must be at least 1")
    t0 = time.perf_counter()
    store.mkdir(parents=True, exist_ok=True)
    with exclusive(store, SyncBusy(f"{store}: another publish is running")):
        _clean_leftovers(store)
        old = read_index(store)
        # A lone file's name is not part of the checkpoint (its digest ignores it): the
        # store and the standbys call it model.safetensors, whatever the trainer wrote.
        layout = Layout(None if new.is_dir() else ONE_FILE)
        if old is not None and old.layout != layout:
            raise StoreError(
                f"{store}: the store holds {old.layout.describe()}; {new} is "
                f"{layout.describe()} (publish it to a new store)"
            )
        ckpt = Checkpoint(new)
        try:
            manifest = build_manifest(ckpt, old.chunk_size if old else chunk, progress)
        finally:
            ckpt.close()
        stats = PublishStats(generation, manifest.digest, checkpoint_bytes=manifest.nbytes)
        if old is not None and generation in old.generations:
            if old.generations[generation].digest != manifest.digest:
                raise StoreError(
                    f"{store}: generation {generation} is already published with digest "
                    f"{old.generations[generation].digest}; {new} has {manifest.digest}"
                )
            stats.already = True
            stats.seconds = time.perf_counter() - t0
            return stats
        if old is not None and generation < old.latest:
            raise StoreError(
                f"{store}: generation {generation} is older than the latest, {old.latest}; "
                "generations only grow"
            )
        man_rel = f"manifests/{generation}.json"
        _write_atomic(store / man_rel, json.dumps(manifest.to_json(), sort_keys=True).encode())
        # The anchor's copy and sha256 run beside the diff (both release the GIL).
        with ThreadPoolExecutor(max_workers=1, thread_name_prefix="standbyc-anchor") as pool:
            anchor_job = pool.submit(_write_anchor, new, store, generation)
            delta = None
            if old is not None:
                prev = old.generations[old.latest]
                rel = f"deltas/{prev.number}-{generation}.delta"
                tmp = _tmp(store / rel)
                tmp.parent.mkdir(parents=True, exist_ok=True)
                base = anchor_path(store, layout, prev.number)
                diff(new, tmp, old_path=base, chunk=old.chunk_size, progress=progress)
                fsync_path(tmp)
                tmp.replace(store / rel)
                fsync_path(tmp.parent)
                delta = Delta(prev.number, _stored(store, rel), prev.digest, manifest.digest)
                stats.delta_from, stats.delta_bytes = prev.number, delta.file.size
            anchor = anchor_job.result()
        stats.anchor_bytes = sum(f.size for f in anchor)
        gen = Generation(
            generation, manifest.digest, manifest.nbytes, _stored(store, man_rel), delta, anchor
        )
        gens = {**(old.generations if old else {}), generation: gen}
        index = Index(layout, manifest.chunk_size, _prune(gens, keep, anchor_every))
        _write_atomic(store / INDEX, index.dumps())
        stats.pruned = _remove_unlisted(store, index)
    stats.seconds = time.perf_counter() - t0
    return stats
