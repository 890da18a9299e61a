"""Diff: turn OLD (bytes or just a manifest) and NEW into a delta file.

Per target tensor, in NEW's file and data order:

1. same name and same content hash in the base -> whole-tensor copy
   (also covers reshape and re-type when the bytes are equal);
2. same content hash under another name -> whole-tensor copy (rename);
3. same name and byte length -> per chunk: copy when the chunk hashes match,
   else the smallest of sparse / XOR / raw (raw only, with a manifest base);
4. otherwise raw chunks (added tensor, or size changed).

Case 3 takes one pass: each chunk is hashed and, when it differs, encoded at
once while its bytes are still in the CPU cache. Only then is the tensor's
hash known; if it turns out to be a whole copy (1 or 2), the chunks just
written to the payload are rolled back.
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
    tensor_hash,
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
    same = by_name.get(t.name)
    src = same if same is not None and same.nbytes == t.nbytes else None
    mark = writer.mark()
    if src is None:
        # No chunk-wise source: hash first, a content match elsewhere (a rename,
        # reshape or re-type) saves encoding the tensor raw.
        th, _ = hash_tensor(f, t, chunk)
        ops = None
    else:
        # One pass: each chunk is hashed, then encoded while it is still in cache.
        old_loc = old.by_name.get(src.name) if old is not None else None
        th, ops = _chunks(loc, src, old_loc, chunk=chunk, enc=enc, writer=writer)
    entry: dict[str, Any] = {
        "name": t.name, "dtype": t.dtype, "shape": list(t.shape),
        "nbytes": t.nbytes, "xxh128": th.hex(), "source": None,
    }  # fmt: skip
    whole = same if same is not None and same.hash == th else by_hash.get(th)
    if whole is not None and t.nbytes:
        writer.rollback(mark)  # drops a patch made against the same-named tensor
        entry["source"] = _ref(whole)
        entry["chunks"] = "copy"
        kind = "unchanged" if whole.name == t.name and whole.dtype == t.dtype and \
            whole.shape == t.shape else "copied"  # fmt: skip
        stats.tensors[kind] += 1
        return entry
    if ops is None:  # raw chunks (this hashes the tensor again: cheap next to encoding)
        _, ops = _chunks(loc, None, None, chunk=chunk, enc=enc, writer=writer)
    entry["source"] = _ref(src) if src is not None else None
    entry["chunks"] = [[op, size, *params] for op, size, params in ops]
    for op, size, _ in ops:
        stats.chunks[op] += 1
        stats.chunk_bytes[op] += size
    stats.tensors["patched" if src is not None else "raw"] += 1
    return entry


Op = tuple[str, int, tuple[int, ...]]  # op, payload bytes, parameters


def _chunks(
    loc: Located,
    src: TensorEntry | None,
    old: Located | None,
    *,
    chunk: int,
    enc: Encoder,
    writer: DeltaWriter,
) -> tuple[bytes, list[Op]]:
    """Hash and encode a tensor chunk by chunk against its same-named source, if any."""
    f, t = loc.file, loc.info
    hashes: list[bytes] = []
    ops: list[Op] = []
    done = 0
    for k, (lo, hi) in enumerate(chunk_spans(t.nbytes, chunk)):
        new = f.view(t.begin + lo, t.begin + hi)
        h = h128(new)
        hashes.append(h)
        if src is not None and src.chunks[k] == h:
            e = Encoded(COPY, b"")
        elif old is not None:
            ob = old.info.begin
            e = enc.delta(old.file.view(ob + lo, ob + hi), new, t.width)
        else:
            e = enc.raw(new, t.width)  # no source, or only the standby's manifest
        ops.append((e.op, writer.add(e.payload), e.params))
        if hi - done >= WINDOW or hi == t.nbytes:
            f.release(t.begin + done, t.begin + hi)
            if old is not None:
                old.file.release(old.info.begin + done, old.info.begin + hi)
            done = hi
    return tensor_hash(hashes), ops


def _ref(src: TensorEntry) -> dict[str, Any]:
    return {"name": src.name, "nbytes": src.nbytes, "xxh128": src.hash.hex()}
