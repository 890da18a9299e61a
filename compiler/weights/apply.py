"""Apply: BASE + DELTA -> OUT, verified before and after, crash-safe.

Order of work, so a bad delta or a wrong base never touches anything:
delta preamble/header/payload checksums -> base digest -> target headers
parse -> write into a temp file (or temp dir) next to OUT -> fsync -> re-hash
the written bytes against the target digest -> atomic rename (or, for a
directory, an atomic RENAME_EXCHANGE swap) -> fsync the parent directory.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import errno
import os
import shutil
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from compiler.weights.deltafile import (
    DeltaHeader,
    DeltaReader,
    FileTarget,
    TensorDelta,
    iter_chunks,
)
from compiler.weights.encode import Decoder
from compiler.weights.errors import DeltaError, SafetensorsError
from compiler.weights.manifest import WINDOW, Manifest, Progress, build_manifest
from compiler.weights.safetensors_io import (
    DTYPE_WIDTH,
    INDEX_NAME,
    Checkpoint,
    SafetensorsFile,
    U8Array,
    parse_header,
)


@dataclass
class ApplyStats:
    delta_bytes: int = 0
    target_bytes: int = 0
    seconds: float = 0.0
    fsync_seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "delta_bytes": self.delta_bytes,
            "target_bytes": self.target_bytes,
            "seconds": round(self.seconds, 4),
            "fsync_seconds": round(self.fsync_seconds, 4),
            "gb_per_s": self.target_bytes / self.seconds / 1e9 if self.seconds else 0.0,
        }


def apply(
    base_path: Path,
    delta_path: Path,
    out: Path | None = None,
    *,
    progress: Progress | None = None,
) -> ApplyStats:
    """Rebuild the delta's target from ``base_path`` at ``out`` (None: in place)."""
    t0 = time.perf_counter()
    reader = DeltaReader(delta_path)
    try:
        reader.verify_payload()
        hdr = reader.header
        base = Checkpoint(base_path)
        try:
            bm = build_manifest(base, hdr.chunk_size, progress)
            _check_base(base_path, bm, hdr)
            dest = base_path if out is None else out
            stats = ApplyStats(delta_bytes=reader.size, target_bytes=hdr.target_size)
            _write_target(base, reader, dest, stats, progress)
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


def _write_target(
    base: Checkpoint, reader: DeltaReader, dest: Path, stats: ApplyStats, progress: Progress | None
) -> None:
    hdr = reader.header
    dec = Decoder()
    if dest.is_dir() != hdr.sharded and dest.exists():
        kind = "a sharded directory" if hdr.sharded else "a single file"
        raise DeltaError(f"{dest}: the delta's target is {kind}; the output must be one too")
    tmp = dest.with_name(f".{dest.name}.standbyc-tmp-{os.getpid()}")
    _remove(tmp)
    try:
        if hdr.sharded:
            tmp.mkdir()
            if hdr.index is not None:
                raw = dec.unzstd(reader.section(hdr.index.offset, hdr.index.length),
                                 hdr.index.size, f"{reader.path}: index")  # fmt: skip
                _write_small(tmp / INDEX_NAME, raw.tobytes(), stats)
            pos = 0
            for ft in hdr.files:
                _check_name(ft.name, reader.path)
                n = len(ft.tensors)
                _write_file(base, reader, ft, hdr=hdr, first=pos, path=tmp / ft.name, dec=dec,
                            stats=stats, progress=progress)  # fmt: skip
                pos += n
            _fsync_dir(tmp, stats)
        else:
            _write_file(base, reader, hdr.files[0], hdr=hdr, first=0, path=tmp, dec=dec,
                        stats=stats, progress=progress)  # fmt: skip
        written = Checkpoint(tmp)
        try:
            got = build_manifest(written, hdr.chunk_size)
        finally:
            written.close()
        if got.digest != hdr.target_digest:
            raise DeltaError(
                f"{reader.path}: rebuilt target digest {got.digest} does not match "
                f"the delta's target digest {hdr.target_digest}"
            )
        _commit(tmp, dest, stats)
    except BaseException:
        _remove(tmp)
        raise


def _check_name(name: str, where: Path) -> None:
    if not name or "/" in name or "\\" in name or name in {".", "..", INDEX_NAME}:
        raise DeltaError(f"{where}: target shard name {name!r} is not a plain file name")


def _write_file(
    base: Checkpoint,
    reader: DeltaReader,
    ft: FileTarget,
    *,
    hdr: DeltaHeader,
    first: int,
    path: Path,
    dec: Decoder,
    stats: ApplyStats,
    progress: Progress | None,
) -> None:
    where = f"{reader.path}: file {ft.name or '(single)'}"
    tensors = hdr.tensors[first : first + len(ft.tensors)]
    prefix = _checked_prefix(reader, ft, tensors, dec, where)
    # Two buffers: chunk i is written by the writer thread while chunk i+1 is decoded
    # (numpy, zstd and os.write all release the GIL). One writer keeps the file order.
    bufs = [np.empty(hdr.chunk_size, dtype=np.uint8) for _ in range(2)]
    busy: list[Future[None] | None] = [None, None]
    submitted: list[Future[None]] = []  # every write, so none fails unnoticed
    turn = 0
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    writer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="standbyc-apply-write")
    try:
        writer.submit(_write_all, fd, prefix.data).result()
        for t in tensors:
            src = base.by_name.get(t.source.name) if t.source is not None else None
            if t.source is not None and (src is None or src.info.nbytes != t.nbytes):
                raise DeltaError(f"{where}: source tensor {t.source.name!r} missing in base")
            done = 0  # tensor bytes whose mapped pages were already released
            payload_from = -1
            for lo, hi, op in iter_chunks(t, hdr.chunk_size):
                if src is not None and (op is None or op.op == "c"):
                    # In-kernel copy: no Python-level pass over unchanged bytes.
                    submitted.append(
                        writer.submit(_copy_range, src.file, src.info.begin + lo, fd, hi - lo)
                    )
                else:
                    assert op is not None
                    old = src.file.view(src.info.begin + lo, src.info.begin + hi) if src else None
                    pending = busy[turn]
                    if pending is not None:
                        pending.result()  # this buffer's previous write is done (or raises)
                    out = bufs[turn][: hi - lo]
                    dec.decode(op.op, payload=reader.section(op.offset, op.length),
                               params=op.params, old=old, out=out, width=DTYPE_WIDTH[t.dtype],
                               where=f"{where}: tensor {t.name!r} bytes [{lo}, {hi})")  # fmt: skip
                    written = writer.submit(_write_all, fd, out.data)
                    busy[turn] = written
                    submitted.append(written)
                    turn ^= 1
                    payload_from = op.offset if payload_from < 0 else payload_from
                    if hi - done >= WINDOW or hi == t.nbytes:
                        # Release in windows: one madvise per chunk costs ~50 us. The
                        # writer only reads our own buffers, never these mapped pages.
                        reader.release(payload_from, op.offset + op.length)
                        payload_from = -1
                        if src is not None:
                            src.file.release(src.info.begin + done, src.info.begin + hi)
                        done = hi
            if progress:
                progress(t.nbytes)
        for future in submitted:
            future.result()  # in order: raises the first failed write
        t0 = time.perf_counter()
        os.fsync(fd)
        stats.fsync_seconds += time.perf_counter() - t0
    finally:
        writer.shutdown(wait=True)
        os.close(fd)


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


def _copy_range(src: SafetensorsFile, offset: int, dst: int, n: int) -> None:
    """Append ``n`` bytes of ``src`` at ``offset`` to ``dst`` without a Python-level copy."""
    while n > 0:
        try:
            done = os.copy_file_range(src.fileno(), dst, n, offset)
        except OSError as exc:
            # copy_file_range cannot cross filesystems on older kernels (EXDEV);
            # sendfile can, and still copies inside the kernel.
            if exc.errno not in (errno.EXDEV, errno.ENOSYS, errno.EINVAL, errno.EOPNOTSUPP):
                raise
            done = os.sendfile(dst, src.fileno(), offset, n)
        if done <= 0:
            raise DeltaError(f"{src.path}: unexpected end of file at offset {offset}")
        n -= done
        offset += done


def _write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data) :]


def _write_small(path: Path, data: bytes, stats: ApplyStats) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        _write_all(fd, memoryview(data))
        t0 = time.perf_counter()
        os.fsync(fd)
        stats.fsync_seconds += time.perf_counter() - t0
    finally:
        os.close(fd)


def _fsync_dir(path: Path, stats: ApplyStats) -> None:
    t0 = time.perf_counter()
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    stats.fsync_seconds += time.perf_counter() - t0


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2); False where unsupported."""
    name = ctypes.util.find_library("c")
    if name is None:
        return False
    libc = ctypes.CDLL(name, use_errno=True)
    fn = getattr(libc, "renameat2", None)
    if fn is None:
        return False
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return bool(rc == 0)


def _commit(tmp: Path, dest: Path, stats: ApplyStats) -> None:
    """Make ``tmp`` visible as ``dest`` in one atomic step."""
    if tmp.is_dir() and dest.exists():
        # A directory cannot be replaced by rename; swap the two atomically so a
        # crash leaves either the old complete tree or the new one at dest.
        if not _exchange(tmp, dest):
            raise DeltaError(f"{dest}: cannot swap directories atomically on this system")
        _fsync_dir(dest.parent, stats)
        _remove(tmp)
    else:
        tmp.replace(dest)
        _fsync_dir(dest.parent, stats)


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
