"""How apply puts bytes on disk: a temp file beside the target, locked while it is written
(so one left by a killed apply can be told from one being written), copies inside the
kernel, fsyncs, and the atomic swap into place."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import shutil
import time
from pathlib import Path

from compiler.fsutil import exchange
from compiler.weights.errors import DeltaError
from compiler.weights.safetensors_io import SafetensorsFile, U8Array


def tmp_prefix(dest: Path) -> str:
    return f".{dest.name}.standbyc-tmp-"


def claim(tmp: Path, *, create: bool = False) -> int:
    """Hold a lock on our temp file (or directory) while we write it: a temp that nobody
    holds belongs to an apply that was killed."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL if create else os.O_RDONLY
    fd = os.open(tmp, flags, 0o644)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def remove_stale_temps(dest: Path) -> list[Path]:
    """Remove the temp files a killed apply left next to ``dest``; leave those a running
    apply holds. Returns what was removed."""
    removed: list[Path] = []
    if not dest.parent.is_dir():
        return removed
    for path in dest.parent.glob(f"{tmp_prefix(dest)}*"):
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            continue  # another apply is writing it
        finally:
            os.close(fd)
        remove(path)
        removed.append(path)
    return removed


def read_exact(f: SafetensorsFile, offset: int, out: U8Array) -> None:
    """Fill ``out`` from ``f`` at ``offset`` (one kernel copy, no page mapping)."""
    view = out.data
    while view:
        n = os.preadv(f.fileno(), [view], offset)
        if n <= 0:
            raise DeltaError(f"{f.path}: unexpected end of file at offset {offset}")
        view, offset = view[n:], offset + n


def copy_range(src: SafetensorsFile, offset: int, dst: int, n: int) -> None:
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


def write_all(fd: int, data: memoryview) -> None:
    while data:
        data = data[os.write(fd, data) :]


def write_small(path: Path, data: bytes) -> float:
    """Write a new file ``path`` and fsync it; the seconds the fsync took."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        write_all(fd, memoryview(data))
        t0 = time.perf_counter()
        os.fsync(fd)
        return time.perf_counter() - t0
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> float:
    """fsync a directory (its entries); the seconds it took."""
    t0 = time.perf_counter()
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - t0


def swap_in(tmp: Path, dest: Path) -> float:
    """Make the finished checkpoint ``tmp`` visible as ``dest`` in one atomic step; the
    seconds its fsync took."""
    if tmp.is_dir() and dest.exists():
        # A directory cannot be replaced by rename; swap the two atomically so a
        # crash leaves either the old complete tree or the new one at dest.
        if not exchange(tmp, dest):
            raise DeltaError(f"{dest}: cannot swap directories atomically on this system")
        took = fsync_dir(dest.parent)
        remove(tmp)
        return took
    tmp.replace(dest)
    return fsync_dir(dest.parent)


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
