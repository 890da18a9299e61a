"""The delta container (docs/delta-format.md): preamble, JSON header, payload.

Layout::

    preamble  64 bytes   magic, version, lengths, xxh3-128 of header and payload
    header    JSON       digests, target layout, per-tensor and per-chunk ops
    payload   sections   back to back, in header order; offsets are implied

Every number read from the file is range-checked before it is used, and the
whole file is hash-checked before ``apply`` touches anything.
"""

from __future__ import annotations

import contextlib
import json
import mmap
import os
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xxhash

from compiler.weights.encode import (
    ABSOLUTE_OPS,
    COPY,
    GAP_WIDTHS,
    OPS,
    RAW,
    SPARSE,
    SPARSE_PLANES,
)
from compiler.weights.errors import DeltaError
from compiler.weights.manifest import MAX_CHUNK, MIN_CHUNK, WINDOW
from compiler.weights.safetensors_io import (
    DTYPE_WIDTH,
    HEADER_CAP,
    INDEX_CAP,
    MAX_RANK,
    open_regular,
)

MAGIC = b"SBYDELTA"
VERSION = 1
PREAMBLE = struct.Struct("<8sHHIQQ16s16s")
assert PREAMBLE.size == 64
HEADER_LIMIT = 256 << 20  # JSON header cap; about 1M chunks of a 1 TB model
PAYLOAD_LIMIT = 1 << 44  # 16 TiB
MAX_TENSORS = 1_000_000
MAX_FILES = 100_000
FORMAT = "standbyc-weights-delta"


def chunk_bound(chunk: int) -> int:
    """Largest section any chunk op may claim: zstd's worst-case expansion, rounded up."""
    return chunk + chunk // 128 + 1024


@dataclass(frozen=True)
class Section:
    """A compressed blob in the payload: absolute offset, stored length, raw size."""

    offset: int
    length: int
    size: int


@dataclass(frozen=True)
class ChunkOp:
    op: str
    offset: int
    length: int
    params: tuple[int, ...]


@dataclass(frozen=True)
class SourceRef:
    name: str
    nbytes: int
    hash: bytes


@dataclass(frozen=True)
class TensorDelta:
    name: str
    dtype: str
    shape: tuple[int, ...]
    nbytes: int
    hash: bytes
    source: SourceRef | None
    whole_copy: bool
    chunks: tuple[ChunkOp, ...]


@dataclass(frozen=True)
class FileTarget:
    name: str
    size: int
    header: Section  # the file's first 8 + N bytes, zstd'd
    header_hash: bytes
    tensors: tuple[str, ...]


@dataclass(frozen=True)
class DeltaHeader:
    chunk_size: int
    base_digest: str
    base_size: int
    target_digest: str
    target_size: int
    sharded: bool
    index: Section | None
    files: tuple[FileTarget, ...]
    tensors: tuple[TensorDelta, ...]


# ---------------------------------------------------------------- writing


class DeltaWriter:
    """Streams payload sections to a temp file; ``finish`` prepends preamble + header."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._tmp = path.with_name(f".{path.name}.payload-{os.getpid()}")
        self._f = self._tmp.open("wb")
        self._hash = xxhash.xxh3_128()
        self.length = 0

    def add(self, data: bytes) -> int:
        self._f.write(data)
        self._hash.update(data)
        self.length += len(data)
        return len(data)

    def finish(self, header: dict[str, Any]) -> int:
        """Write the delta atomically; return its total size."""
        self._f.close()
        raw = json.dumps(header, separators=(",", ":"), sort_keys=True).encode()
        if len(raw) > HEADER_LIMIT:
            raise DeltaError(f"{self.path}: header of {len(raw)} bytes exceeds {HEADER_LIMIT}")
        pre = PREAMBLE.pack(
            MAGIC, VERSION, 0, 0, len(raw), self.length,
            xxhash.xxh3_128_digest(raw), self._hash.digest(),
        )  # fmt: skip
        final = self.path.with_name(f".{self.path.name}.tmp-{os.getpid()}")
        try:
            with final.open("wb") as out, self._tmp.open("rb") as src:
                out.write(pre)
                out.write(raw)
                out.flush()
                _copy_all(src.fileno(), out.fileno(), self.length)
                os.fsync(out.fileno())
            final.replace(self.path)
        finally:
            final.unlink(missing_ok=True)
            self._tmp.unlink(missing_ok=True)
        return PREAMBLE.size + len(raw) + self.length

    def mark(self) -> tuple[int, Any]:
        """A point to roll the payload back to (see ``rollback``)."""
        return self.length, self._hash.copy()

    def rollback(self, mark: tuple[int, Any]) -> None:
        """Drop every section added since ``mark``."""
        length, state = mark
        if length == self.length:
            return
        self._f.flush()
        self._f.truncate(length)
        self._f.seek(length)
        self._hash = state.copy()
        self.length = length

    def abort(self) -> None:
        self._f.close()
        self._tmp.unlink(missing_ok=True)


def _copy_all(src: int, dst: int, n: int) -> None:
    """In-kernel copy of ``n`` bytes from the current positions."""
    while n > 0:
        done = os.copy_file_range(src, dst, min(n, 1 << 30))
        if done <= 0:
            raise OSError("copy_file_range made no progress")
        n -= done


# ---------------------------------------------------------------- reading


def _int(v: object, where: str, hi: int = 1 << 62) -> int:
    if not isinstance(v, int) or isinstance(v, bool) or not 0 <= v <= hi:
        raise DeltaError(f"{where}: expected an integer in [0, {hi}], got {v!r}"[:300])
    return v


def _hex(v: object, where: str) -> bytes:
    if isinstance(v, str) and len(v) == 32:
        try:
            return bytes.fromhex(v)
        except ValueError:
            pass
    raise DeltaError(f"{where}: expected a 32-digit hex hash")


def _obj(v: object, keys: set[str], where: str) -> dict[str, Any]:
    if not isinstance(v, dict) or set(v) != keys:
        raise DeltaError(f"{where}: expected an object with keys {sorted(keys)}")
    return v


def _list(v: object, where: str, cap: int) -> list[Any]:
    if not isinstance(v, list) or len(v) > cap:
        raise DeltaError(f"{where}: expected a list of at most {cap} items")
    return v


class _Cursor:
    """Hands out payload sections in order, checking each fits."""

    def __init__(self, start: int, length: int) -> None:
        self.pos = start
        self.end = start + length

    def take(self, n: int, where: str) -> int:
        if n > self.end - self.pos:
            raise DeltaError(
                f"{where}: section of {n} bytes at payload offset {self.pos - PREAMBLE.size} "
                f"runs past the end of the payload"
            )
        self.pos += n
        return self.pos - n


class DeltaReader:
    """An open delta: validated header, payload mapped read-only."""

    def __init__(self, path: Path) -> None:
        self.path = path
        where = str(path)
        fd = open_regular(path, DeltaError, "delta")
        try:
            size = os.fstat(fd).st_size
            if size < PREAMBLE.size:
                raise DeltaError(f"{where}: truncated: {size} bytes is shorter than the preamble")
            magic, version, reserved, flags, hlen, plen, hhash, phash = PREAMBLE.unpack(
                os.pread(fd, PREAMBLE.size, 0)
            )
            if magic != MAGIC:
                raise DeltaError(f"{where}: not a standbyc delta (bad magic {magic!r})")
            if version != VERSION or reserved or flags:
                raise DeltaError(f"{where}: unsupported delta version {version} flags {flags}")
            if hlen > HEADER_LIMIT:
                raise DeltaError(f"{where}: header length {hlen} exceeds the {HEADER_LIMIT} cap")
            if plen > PAYLOAD_LIMIT:
                raise DeltaError(f"{where}: payload length {plen} exceeds the {PAYLOAD_LIMIT} cap")
            expect = PREAMBLE.size + hlen + plen
            if size != expect:
                what = "truncated" if size < expect else "trailing bytes"
                raise DeltaError(
                    f"{where}: {what}: preamble declares {expect} bytes, file has {size}"
                )
            raw = os.pread(fd, hlen, PREAMBLE.size)
            if xxhash.xxh3_128_digest(raw) != hhash:
                raise DeltaError(f"{where}: header checksum mismatch (corrupted header)")
            self.payload_hash: bytes = phash
            self.payload_start = PREAMBLE.size + hlen
            self.payload_len: int = plen
            self.size = size
            self.header = _parse_header(raw, self.payload_start, plen, where)
            self._mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        finally:
            os.close(fd)

    def verify_payload(self) -> None:
        """Hash the whole payload against the preamble before anything is written."""
        h = xxhash.xxh3_128()
        for lo in range(self.payload_start, self.size, WINDOW):
            hi = min(lo + WINDOW, self.size)
            h.update(np.frombuffer(self._mm, np.uint8, hi - lo, lo).data)
            self.release(lo, hi)
        if h.digest() != self.payload_hash:
            raise DeltaError(f"{self.path}: payload checksum mismatch (corrupted payload)")

    def section(self, offset: int, length: int) -> memoryview:
        return memoryview(self._mm)[offset : offset + length]

    def release(self, lo: int, hi: int) -> None:
        """Drop our mapping of file bytes [lo, hi) (they stay in page cache)."""
        start = lo - lo % mmap.PAGESIZE
        if hi > start:
            self._mm.madvise(mmap.MADV_DONTNEED, start, hi - start)

    def close(self) -> None:
        with contextlib.suppress(BufferError):
            self._mm.close()


def _parse_header(raw: bytes, start: int, plen: int, where: str) -> DeltaHeader:
    try:
        doc = json.loads(raw)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise DeltaError(f"{where}: header is not valid JSON: {exc}") from None
    top = _obj(doc, {"format", "version", "chunk_size", "base", "target", "tensors"}, where)
    if top["format"] != FORMAT or top["version"] != VERSION:
        raise DeltaError(f"{where}: not a {FORMAT} version {VERSION} header")
    chunk = _int(top["chunk_size"], f"{where}: chunk_size", MAX_CHUNK)
    if chunk < MIN_CHUNK or chunk & (chunk - 1):
        raise DeltaError(f"{where}: chunk_size {chunk} is not a power of two >= {MIN_CHUNK}")
    cur = _Cursor(start, plen)
    base = _obj(top["base"], {"digest", "size"}, f"{where}: base")
    tgt = _obj(top["target"], {"digest", "size", "sharded", "index", "files"}, f"{where}: target")
    if not isinstance(tgt["sharded"], bool):
        raise DeltaError(f"{where}: target.sharded must be a boolean")
    index = None
    if tgt["index"] is not None:
        index = _section(tgt["index"], cur, INDEX_CAP, f"{where}: target.index")
    files = []
    for i, fd in enumerate(_list(tgt["files"], f"{where}: target.files", MAX_FILES)):
        fw = f"{where}: target.files[{i}]"
        f = _obj(fd, {"name", "size", "header", "header_xxh128", "tensors"}, fw)
        names = _list(f["tensors"], f"{fw}.tensors", MAX_TENSORS)
        if not isinstance(f["name"], str) or not all(isinstance(n, str) for n in names):
            raise DeltaError(f"{fw}: names must be strings")
        files.append(FileTarget(
            f["name"], _int(f["size"], f"{fw}.size"),
            _section(f["header"], cur, HEADER_CAP + 8, f"{fw}.header"),
            _hex(f["header_xxh128"], f"{fw}.header_xxh128"), tuple(names),
        ))  # fmt: skip
    if not tgt["sharded"] and (len(files) != 1 or index is not None or files[0].name):
        raise DeltaError(f"{where}: an unsharded target must be one unnamed file and no index")
    tensors = tuple(
        _tensor(td, cur, chunk, f"{where}: tensors[{i}]")
        for i, td in enumerate(_list(top["tensors"], f"{where}: tensors", MAX_TENSORS))
    )
    order = [n for f in files for n in f.tensors]
    if order != [t.name for t in tensors]:
        raise DeltaError(f"{where}: tensor list does not match the target files' tensor order")
    if cur.pos != cur.end:
        raise DeltaError(
            f"{where}: sections cover {cur.pos - start} bytes but the payload has {plen}"
        )
    return DeltaHeader(
        chunk,
        _hex(base["digest"], f"{where}: base.digest").hex(),
        _int(base["size"], f"{where}: base.size"),
        _hex(tgt["digest"], f"{where}: target.digest").hex(),
        _int(tgt["size"], f"{where}: target.size"),
        tgt["sharded"], index, tuple(files), tensors,
    )  # fmt: skip


def _section(v: object, cur: _Cursor, cap: int, where: str) -> Section:
    s = _obj(v, {"len", "size"}, where)
    size = _int(s["size"], f"{where}.size", cap)
    length = _int(s["len"], f"{where}.len", chunk_bound(cap))
    return Section(cur.take(length, where), length, size)


def _tensor(v: object, cur: _Cursor, chunk: int, where: str) -> TensorDelta:
    t = _obj(v, {"name", "dtype", "shape", "nbytes", "xxh128", "source", "chunks"}, where)
    name = t["name"]
    if not isinstance(name, str) or not isinstance(t["dtype"], str) \
            or t["dtype"] not in DTYPE_WIDTH:  # fmt: skip
        raise DeltaError(f"{where}: bad name or dtype")
    where = f"{where} ({name!r})"[:400]
    shape = tuple(_int(d, f"{where}.shape") for d in _list(t["shape"], f"{where}.shape", MAX_RANK))
    nbytes = _int(t["nbytes"], f"{where}.nbytes")
    source = None
    if t["source"] is not None:
        s = _obj(t["source"], {"name", "nbytes", "xxh128"}, f"{where}.source")
        if not isinstance(s["name"], str):
            raise DeltaError(f"{where}.source.name: expected a string")
        source = SourceRef(s["name"], _int(s["nbytes"], f"{where}.source.nbytes"),
                           _hex(s["xxh128"], f"{where}.source.xxh128"))  # fmt: skip
    whole = t["chunks"] == "copy"
    ops: list[ChunkOp] = []
    if whole:
        if source is None or source.nbytes != nbytes:
            raise DeltaError(f"{where}: a whole-tensor copy needs a source of {nbytes} bytes")
    else:
        n_chunks = -(-nbytes // chunk)
        entries = _list(t["chunks"], f"{where}.chunks", n_chunks)
        if len(entries) != n_chunks:
            raise DeltaError(f"{where}: {len(entries)} chunk ops for {n_chunks} chunks")
        for k, e in enumerate(entries):
            ops.append(_chunk(e, cur, min(chunk, nbytes - k * chunk), source=source,
                              nbytes=nbytes, width=DTYPE_WIDTH[t["dtype"]],
                              where=f"{where}.chunks[{k}]"))  # fmt: skip
    return TensorDelta(name, t["dtype"], shape, nbytes, _hex(t["xxh128"], f"{where}.xxh128"),
                       source, whole, tuple(ops))  # fmt: skip


PARAMS = {SPARSE: 3, SPARSE_PLANES: 3}  # parameters per op; the others take none


def _chunk(
    v: object,
    cur: _Cursor,
    n: int,
    *,
    source: SourceRef | None,
    nbytes: int,
    width: int,
    where: str,
) -> ChunkOp:
    if not isinstance(v, list) or not 2 <= len(v) <= 5 or v[0] not in OPS:
        raise DeltaError(f"{where}: expected [op, length, params...] with op in {list(OPS)}")
    op = v[0]
    length = _int(v[1], f"{where}.length", chunk_bound(n))
    params = tuple(_int(p, f"{where}.params") for p in v[2:])
    if len(params) != PARAMS.get(op, 0):
        raise DeltaError(f"{where}: op {op!r} takes {PARAMS.get(op, 0)} parameters")
    if op in (SPARSE, SPARSE_PLANES):
        count, gw, glen = params  # changed elements, gap width, the gaps' zstd frame length
        if not 0 < count <= n // width or gw not in GAP_WIDTHS or not 0 < glen < length:
            raise DeltaError(f"{where}: bad sparse parameters {list(params)}")
    if op == COPY and length:
        raise DeltaError(f"{where}: a copy chunk carries no payload")
    if op == RAW and length != n:
        raise DeltaError(f"{where}: raw chunk of {length} bytes, expected {n}")
    if op not in ABSOLUTE_OPS and (source is None or source.nbytes != nbytes):
        raise DeltaError(f"{where}: op {op!r} needs a source tensor of {nbytes} bytes")
    return ChunkOp(op, cur.take(length, where), length, params)


def iter_chunks(t: TensorDelta, chunk: int) -> Iterator[tuple[int, int, ChunkOp | None]]:
    """(lo, hi, op) over a tensor's chunks; op is None for a whole-tensor copy."""
    if t.whole_copy:
        yield 0, t.nbytes, None
        return
    for k, op in enumerate(t.chunks):
        yield k * chunk, min((k + 1) * chunk, t.nbytes), op
