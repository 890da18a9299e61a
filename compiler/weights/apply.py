"""Apply: BASE + DELTA -> OUT, verified before and after, crash-safe.

Order of work, so a bad delta or a wrong base never touches anything:
delta preamble/header/payload checksums -> base digest -> target headers
parse -> free-space check -> write into a temp file (or temp dir) next to OUT,
hashing every byte as it is written -> fsync -> check every tensor hash, each
file header and the target digest -> atomic rename (or, for a directory, an
atomic RENAME_EXCHANGE swap) -> fsync the parent directory.

The written bytes are hashed as they are handed to the kernel: decoded chunks
from the very buffer that is written, copied ranges through the base manifest
just checked (the base must not change meanwhile: its size, inode and times
are compared before the rename). ``reread=True`` also hashes the finished
file again from the filesystem, a second full read.
"""

from __future__ import annotations

import os
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from compiler.weights.deltafile import (
    ChunkOp,
    DeltaHeader,
    DeltaReader,
    FileTarget,
    TensorDelta,
    iter_chunks,
)
from compiler.weights.encode import COPY, Decoder
from compiler.weights.errors import DeltaError, DiskFull, SafetensorsError
from compiler.weights.manifest import (
    WINDOW,
    Manifest,
    Progress,
    TensorEntry,
    build_manifest,
    checkpoint_digest,
    h128,
    tensor_hash,
)
from compiler.weights.ondisk import (
    claim,
    copy_range,
    fsync_dir,
    read_exact,
    remove,
    remove_stale_temps,
    swap_in,
    tmp_prefix,
    write_all,
    write_small,
)
from compiler.weights.safetensors_io import (
    DTYPE_WIDTH,
    INDEX_NAME,
    Checkpoint,
    Located,
    U8Array,
    parse_header,
)


@dataclass
class ApplyStats:
    delta_bytes: int = 0
    target_bytes: int = 0
    seconds: float = 0.0
    fsync_seconds: float = 0.0
    reread: bool = False
    target_digest: str = ""  # what the delta rebuilt, verified

    def to_json(self) -> dict[str, Any]:
        return {
            "delta_bytes": self.delta_bytes,
            "target_bytes": self.target_bytes,
            "seconds": round(self.seconds, 4),
            "fsync_seconds": round(self.fsync_seconds, 4),
            "reread": self.reread,
            "target_digest": self.target_digest,
            "gb_per_s": self.target_bytes / self.seconds / 1e9 if self.seconds else 0.0,
        }


def apply(
    base_path: Path,
    delta_path: Path,
    out: Path | None = None,
    *,
    progress: Progress | None = None,
    reread: bool = False,
) -> ApplyStats:
    """Rebuild the delta's target from ``base_path`` at ``out`` (None: in place)."""
    t0 = time.perf_counter()
    reader = DeltaReader(delta_path)
    try:
        reader.verify_payload()
        hdr = reader.header
        base = Checkpoint(base_path)
        try:
            before = _identity(base)
            bm = build_manifest(base, hdr.chunk_size, progress)
            _check_base(base_path, bm, hdr)
            dest = _destination(base_path, out)
            stats = ApplyStats(delta_bytes=reader.size, target_bytes=hdr.target_size,
                               reread=reread)  # fmt: skip
            _check_space(dest, hdr.target_size)
            job = _Job(base, bm, reader, stats, progress, before)
            _write_target(job, dest)
        finally:
            base.close()
    finally:
        reader.close()
    stats.seconds = time.perf_counter() - t0
    return stats


def _check_base(path: Path, bm: Manifest, hdr: DeltaHeader) -> None:
    if bm.digest == hdr.base_digest:
        return
    have = bm.by_name()
    for t in hdr.tensors:
        s = t.source
        if s is None:
            continue
        got = have.get(s.name)
        if got is None:
            raise DeltaError(f"{path}: the delta's base has tensor {s.name!r}, this base does not")
        if got.hash != s.hash:
            raise DeltaError(
                f"{path}: tensor {s.name!r} has hash {got.hash.hex()}, the delta's base has "
                f"{s.hash.hex()}: this delta is for another base"
            )
    raise DeltaError(
        f"{path}: base digest {bm.digest} does not match the delta's base digest "
        f"{hdr.base_digest}: this delta is for another base"
    )


@dataclass(frozen=True)
class _Identity:
    """What must not change about a base file while apply copies from it."""

    dev: int
    ino: int
    size: int
    mtime_ns: int
    ctime_ns: int


def _identity(base: Checkpoint) -> list[_Identity]:
    out = []
    for f in base.files:
        st = os.fstat(f.fileno())
        out.append(_Identity(st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns))
    return out


def _destination(base: Path, out: Path | None) -> Path:
    """Where the target goes: ``out``, or the base itself (through a symlink, to the file it
    names: replacing the link would leave the real file old). Its directory must exist."""
    dest = base.resolve() if out is None else out
    if out is not None and out.is_symlink():
        dest = out.resolve()
    if not dest.parent.is_dir():
        raise DeltaError(f"{dest}: the directory {dest.parent} does not exist")
    return dest


def _check_space(dest: Path, need: int) -> None:
    """Refuse before writing when the filesystem plainly cannot hold the target."""
    try:
        st = os.statvfs(dest.parent if dest.parent != Path() else Path.cwd())
    except OSError:
        return  # the write itself will report the real error
    free = st.f_bavail * st.f_frsize
    if need > free:
        raise DiskFull(
            f"{dest}: the target needs {need} bytes, the filesystem has {free} free; "
            "nothing was written"
        )


@dataclass
class _Job:
    """Everything one apply run shares between the files it writes."""

    base: Checkpoint
    manifest: Manifest
    reader: DeltaReader
    stats: ApplyStats
    progress: Progress | None
    identity: list[_Identity]
    dec: Decoder = field(default_factory=Decoder)
    known: dict[str, TensorEntry] = field(init=False)  # the base manifest by tensor name

    def __post_init__(self) -> None:
        self.known = self.manifest.by_name()


def _write_target(job: _Job, dest: Path) -> None:
    reader, hdr, stats = job.reader, job.reader.header, job.stats
    if dest.is_dir() != hdr.sharded and dest.exists():
        kind = "a sharded directory" if hdr.sharded else "a single file"
        raise DeltaError(f"{dest}: the delta's target is {kind}; the output must be one too")
    remove_stale_temps(dest)
    tmp = dest.with_name(f"{tmp_prefix(dest)}{os.getpid()}")
    remove(tmp)
    lock = -1
    try:
        digest_files: list[tuple[str, bytes, list[bytes]]] = []
        index_hash = None
        if hdr.sharded:
            tmp.mkdir()
            lock = claim(tmp)
            if hdr.index is not None:
                raw = job.dec.unzstd(reader.section(hdr.index.offset, hdr.index.length),
                                     hdr.index.size, f"{reader.path}: index")  # fmt: skip
                index_hash = h128(raw)
                stats.fsync_seconds += write_small(tmp / INDEX_NAME, raw.tobytes())
            pos = 0
            for ft in hdr.files:
                _check_name(ft.name, reader.path)
                n = len(ft.tensors)
                digest_files.append(_write_file(job, ft, first=pos, path=tmp / ft.name))
                pos += n
            stats.fsync_seconds += fsync_dir(tmp)
        else:
            lock = claim(tmp, create=True)
            digest_files.append(_write_file(job, hdr.files[0], first=0, path=tmp))
        got = checkpoint_digest(hdr.chunk_size, digest_files, index_hash)
        if got != hdr.target_digest:
            raise DeltaError(
                f"{reader.path}: rebuilt target digest {got} does not match "
                f"the delta's target digest {hdr.target_digest}"
            )
        if _identity(job.base) != job.identity:
            raise DeltaError(f"{job.base.path}: the base changed while the delta was applied")
        if stats.reread:
            _reread(tmp, hdr, reader.path, job.progress)
        stats.fsync_seconds += swap_in(tmp, dest)
        stats.target_digest = got
    except BaseException:
        remove(tmp)
        raise
    finally:
        if lock >= 0:
            os.close(lock)


def _reread(tmp: Path, hdr: DeltaHeader, where: Path, progress: Progress | None) -> None:
    """Hash the finished output again from the filesystem (``--reread``)."""
    written = Checkpoint(tmp)
    try:
        got = build_manifest(written, hdr.chunk_size, progress)
    finally:
        written.close()
    if got.digest != hdr.target_digest:
        raise DeltaError(
            f"{where}: re-read target digest {got.digest} does not match "
            f"the delta's target digest {hdr.target_digest}"
        )


def _check_name(name: str, where: Path) -> None:
    if not name or "/" in name or "\\" in name or name in {".", "..", INDEX_NAME}:
        raise DeltaError(f"{where}: target shard name {name!r} is not a plain file name")


def _write_file(
    job: _Job, ft: FileTarget, *, first: int, path: Path
) -> tuple[str, bytes, list[bytes]]:
    """Write one target file; return its name, header hash and tensor hashes as written."""
    reader, hdr = job.reader, job.reader.header
    where = f"{reader.path}: file {ft.name or '(single)'}"
    tensors = hdr.tensors[first : first + len(ft.tensors)]
    prefix = _checked_prefix(reader, ft, tensors, job.dec, where)
    header_hash = h128(prefix)
    if header_hash != ft.header_hash:
        raise DeltaError(f"{where}: embedded safetensors header does not match its hash")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)  # ours: claimed, or in our dir
    out = _FileWriter(job, fd, where)
    try:
        out.write(prefix)
        hashes = [out.tensor(t) for t in tensors]
        out.drain()
        size = os.fstat(fd).st_size
        if size != ft.size:
            raise DeltaError(f"{where}: wrote {size} bytes, expected {ft.size}")
        t0 = time.perf_counter()
        os.fsync(fd)
        job.stats.fsync_seconds += time.perf_counter() - t0
    finally:
        out.close()
        os.close(fd)
    return ft.name, header_hash, hashes


class _FileWriter:
    """Appends one target file's tensors in order and hashes what it hands to the kernel.

    Two buffers: a writer thread writes chunk i while the caller reads, decodes and
    hashes chunk i+1 into the other one (pread, numpy, zstd, xxhash and write all
    release the GIL). A single writer keeps the file order, so in-kernel copies can
    append at the file position.
    """

    def __init__(self, job: _Job, fd: int, where: str) -> None:
        self.job, self.fd, self.where = job, fd, where
        self.chunk = job.reader.header.chunk_size
        self._bufs = [np.empty(self.chunk, dtype=np.uint8) for _ in range(2)]
        self._busy: list[Future[None] | None] = [None, None]
        self._submitted: list[Future[None]] = []  # every write, so none fails unnoticed
        self._turn = 0
        self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="standbyc-apply-write")

    def write(self, data: U8Array) -> None:
        self._pool.submit(write_all, self.fd, data.data).result()

    def tensor(self, t: TensorDelta) -> bytes:
        """Append tensor ``t``; return its hash once the bytes written are checked."""
        src = self.job.base.by_name.get(t.source.name) if t.source is not None else None
        if t.source is not None and (src is None or src.info.nbytes != t.nbytes):
            raise DeltaError(f"{self.where}: source tensor {t.source.name!r} missing in base")
        base_chunks = self.job.known[t.source.name].chunks if t.source is not None else ()
        hashes: list[bytes] = []
        payload_from = -1
        for lo, hi, op in iter_chunks(t, self.chunk):
            if src is not None and (op is None or op.op == COPY):
                # In-kernel copy of base bytes checked moments ago; their hashes are known.
                self._submitted.append(self._pool.submit(
                    copy_range, src.file, src.info.begin + lo, self.fd, hi - lo
                ))  # fmt: skip
                hashes.extend(base_chunks[lo // self.chunk : -(-hi // self.chunk)])
                continue
            assert op is not None
            hashes.append(self._decoded(t, src, lo, hi, op))
            payload_from = op.offset if payload_from < 0 else payload_from
            if op.offset + op.length - payload_from >= WINDOW or hi == t.nbytes:
                self.job.reader.release(payload_from, op.offset + op.length)
                payload_from = -1
        got = tensor_hash(hashes)
        if got != t.hash:
            raise DeltaError(
                f"{self.where}: tensor {t.name!r} rebuilt with hash {got.hex()}, "
                f"the delta says {t.hash.hex()}"
            )
        if self.job.progress:
            self.job.progress(t.nbytes)
        return got

    def _decoded(self, t: TensorDelta, src: Located | None, lo: int, hi: int, op: ChunkOp) -> bytes:
        pending = self._busy[self._turn]
        if pending is not None:
            pending.result()  # this buffer's previous write is done (or raises)
        out = self._bufs[self._turn][: hi - lo]
        if src is not None:
            read_exact(src.file, src.info.begin + lo, out)  # decoded in place
        where = f"{self.where}: tensor {t.name!r} bytes [{lo}, {hi})"
        self.job.dec.decode(op.op, payload=self.job.reader.section(op.offset, op.length),
                            params=op.params, old=out if src is not None else None, out=out,
                            width=DTYPE_WIDTH[t.dtype], where=where)  # fmt: skip
        digest = h128(out)
        written = self._pool.submit(write_all, self.fd, out.data)
        self._busy[self._turn] = written
        self._submitted.append(written)
        self._turn ^= 1
        return digest

    def drain(self) -> None:
        for future in self._submitted:
            future.result()  # in order: raises the first failed write

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def _checked_prefix(
    reader: DeltaReader,
    ft: FileTarget,
    tensors: tuple[TensorDelta, ...],
    dec: Decoder,
    where: str,
) -> U8Array:
    """The target file's first 8 + N bytes, checked against the delta's tensor list."""
    prefix = dec.unzstd(reader.section(ft.header.offset, ft.header.length), ft.header.size, where)
    n = int.from_bytes(prefix[:8].tobytes(), "little") if len(prefix) >= 8 else -1
    if n != len(prefix) - 8:
        raise DeltaError(f"{where}: embedded safetensors header length is inconsistent")
    data_len = sum(t.nbytes for t in tensors)
    if ft.size != len(prefix) + data_len:
        raise DeltaError(f"{where}: declared size {ft.size} != header + tensor bytes")
    try:
        infos, _ = parse_header(prefix[8:].tobytes(), data_len, where)
    except SafetensorsError as exc:
        raise DeltaError(str(exc)) from None
    for info, t in zip(infos, tensors, strict=True):
        if (info.name, info.dtype, info.shape, info.nbytes) != (t.name, t.dtype, t.shape, t.nbytes):
            raise DeltaError(f"{where}: tensor {t.name!r} disagrees with the embedded header")
    return prefix
