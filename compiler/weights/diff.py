"""Diff: turn OLD (bytes or just a manifest) and NEW into a delta file.

Per target tensor, in NEW's file and data order:

1. same name and same content hash in the base -> whole-tensor copy
   (also covers reshape and re-type when the bytes are equal);
2. same content hash under another name -> whole-tensor copy (rename);
3. same name and byte length -> per chunk: copy when the chunk hashes match,
   else the smallest of sparse / XOR / raw (raw only, with a manifest base);
4. otherwise raw chunks (added tensor, or size changed).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import zstandard

from compiler.weights import DEFAULT_CHUNK
from compiler.weights.deltafile import FORMAT, VERSION, DeltaWriter
from compiler.weights.encode import COPY, Encoded, Encoder
from compiler.weights.manifest import (
    WINDOW,
    Manifest,
    Progress,
    TensorEntry,
    build_manifest,
    checkpoint_digest,
    chunk_spans,
    h128,
    hash_tensor,
)
from compiler.weights.safetensors_io import Checkpoint, Located


@dataclass
class DiffStats:
    base_bytes: int = 0
    target_bytes: int = 0
    delta_bytes: int = 0
    tensors: Counter[str] = field(default_factory=Counter)
    chunks: Counter[str] = field(default_factory=Counter)
    chunk_bytes: Counter[str] = field(default_factory=Counter)
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "base_bytes": self.base_bytes,
            "target_bytes": self.target_bytes,
            "delta_bytes": self.delta_bytes,
            "ratio": self.delta_bytes / self.target_bytes if self.target_bytes else 0.0,
            "tensors": dict(self.tensors),
            "chunks": dict(self.chunks),
            "chunk_payload_bytes": dict(self.chunk_bytes),
            "seconds": round(self.seconds, 4),
            "gb_per_s": self.target_bytes / self.seconds / 1e9 if self.seconds else 0.0,
        }


def diff(
    new_path: Path,
    out: Path,
    *,
    old_path: Path | None = None,
    base_manifest: Manifest | None = None,
    chunk: int = DEFAULT_CHUNK,
    progress: Progress | None = None,
) -> DiffStats:
    """Write a delta from OLD (or its manifest) to NEW at ``out``."""
    t0 = time.perf_counter()
    old = Checkpoint(old_path) if old_path is not None else None
    new = Checkpoint(new_path)
    try:
        if base_manifest is None:
            assert old is not None
            base_manifest = build_manifest(old, chunk, progress)
        chunk = base_manifest.chunk_size
        stats = DiffStats(base_bytes=base_manifest.nbytes, target_bytes=new.nbytes)
        writer = DeltaWriter(out)
        try:
            header = _write(new, old, base_manifest, chunk=chunk, writer=writer, stats=stats,
                            progress=progress)  # fmt: skip
            stats.delta_bytes = writer.finish(header)
        except BaseException:
            writer.abort()
            raise
    finally:
        new.close()
        if old is not None:
            old.close()
    stats.seconds = time.perf_counter() - t0
    return stats


def _write(
    new: Checkpoint,
    old: Checkpoint | None,
    base: Manifest,
    *,
    chunk: int,
    writer: DeltaWriter,
    stats: DiffStats,
    progress: Progress | None,
) -> dict[str, Any]:
    zc = zstandard.ZstdCompressor(level=3)
    by_name = base.by_name()
    by_hash: dict[bytes, TensorEntry] = {}
    for known in by_name.values():
        by_hash.setdefault(known.hash, known)
    enc = Encoder(chunk)
    index = None
    if new.index_bytes is not None:
        index = {"len": writer.add(zc.compress(new.index_bytes)), "size": len(new.index_bytes)}
    files = []
    for f in new.files:
        prefix = f.view(0, f.data_start).tobytes()
        files.append({
            "name": f.name, "size": f.size, "header_xxh128": h128(prefix).hex(),
            "header": {"len": writer.add(zc.compress(prefix)), "size": len(prefix)},
            "tensors": [t.name for t in f.tensors],
        })  # fmt: skip
    tensors = []
    digest_files = []
    try:
        for f in new.files:
            hashes = []
            for t in f.tensors:
                entry = _tensor(Located(f, t), old, by_name=by_name, by_hash=by_hash,
                                chunk=chunk, enc=enc, writer=writer, stats=stats)  # fmt: skip
                hashes.append(bytes.fromhex(entry["xxh128"]))
                tensors.append(entry)
                if progress:
                    progress(t.nbytes)
            digest_files.append((f.name, h128(f.view(0, f.data_start)), hashes))
    finally:
        enc.close()
    index_hash = h128(new.index_bytes) if new.index_bytes is not None else None
    return {
        "format": FORMAT,
        "version": VERSION,
        "chunk_size": chunk,
        "base": {"digest": base.digest, "size": base.nbytes},
        "target": {
            "digest": checkpoint_digest(chunk, digest_files, index_hash),
            "size": new.nbytes,
            "sharded": new.sharded,
            "index": index,
            "files": files,
        },
        "tensors": tensors,
    }


def _tensor(
    loc: Located,
    old: Checkpoint | None,
    *,
    by_name: dict[str, TensorEntry],
    by_hash: dict[bytes, TensorEntry],
    chunk: int,
    enc: Encoder,
    writer: DeltaWriter,
    stats: DiffStats,
) -> dict[str, Any]:
    f, t = loc.file, loc.info
    th, new_chunks = hash_tensor(f, t, chunk)
    entry: dict[str, Any] = {
        "name": t.name, "dtype": t.dtype, "shape": list(t.shape),
        "nbytes": t.nbytes, "xxh128": th.hex(), "source": None,
    }  # fmt: skip
    same = by_name.get(t.name)
    whole = same if same is not None and same.hash == th else by_hash.get(th)
    if whole is not None and t.nbytes:
        entry["source"] = _ref(whole)
        entry["chunks"] = "copy"
        kind = "unchanged" if whole.name == t.name and whole.dtype == t.dtype and \
            whole.shape == t.shape else "copied"  # fmt: skip
        stats.tensors[kind] += 1
        return entry
    src = same if same is not None and same.nbytes == t.nbytes else None
    old_loc = old.by_name.get(src.name) if old is not None and src is not None else None
    entry["source"] = _ref(src) if src is not None else None
    ops: list[list[Any]] = []
    done = 0
    for k, (lo, hi) in enumerate(chunk_spans(t.nbytes, chunk)):
        if src is not None and src.chunks[k] == new_chunks[k]:
            e = Encoded(COPY, b"")
        elif old_loc is not None:
            ob = old_loc.info.begin
            e = enc.delta(old_loc.file.view(ob + lo, ob + hi), f.view(t.begin + lo, t.begin + hi),
                          t.width)  # fmt: skip
        else:
            e = enc.raw(f.view(t.begin + lo, t.begin + hi), t.width)
        ops.append([e.op, writer.add(e.payload), *e.params])
        stats.chunks[e.op] += 1
        stats.chunk_bytes[e.op] += len(e.payload)
        if hi - done >= WINDOW or hi == t.nbytes:
            f.release(t.begin + done, t.begin + hi)
            if old_loc is not None:
                ob = old_loc.info.begin
                old_loc.file.release(ob + done, ob + hi)
            done = hi
    entry["chunks"] = ops
    stats.tensors["patched" if src is not None else "raw"] += 1
    return entry


def _ref(src: TensorEntry) -> dict[str, Any]:
    return {"name": src.name, "nbytes": src.nbytes, "xxh128": src.hash.hex()}
