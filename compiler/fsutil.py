"""File-system steps shared by the writers of out/, of a store and of a standby's weights."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import functools
import os
from collections.abc import Callable, Iterator
from pathlib import Path


@contextlib.contextmanager
def exclusive(path: Path, busy: Exception) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` (a directory, or a lock file created if needed);
    raise ``busy`` at once if another process holds it. The kernel drops the lock when the
    holder dies, so a killed run never leaves a stale lock."""
    flags = os.O_RDONLY | os.O_DIRECTORY if path.is_dir() else os.O_RDWR | os.O_CREAT
    fd = os.open(path, flags, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise busy from None
        yield
    finally:
        os.close(fd)  # releases the lock


def fsync_path(path: Path) -> None:
    """fsync a file or a directory (a directory after a rename in it)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


_RENAME_EXCHANGE = 2
_AT_FDCWD = -100


@functools.cache
def _libc(function: str) -> Callable[..., int] | None:
    """A libc function, looked up once (find_library runs ldconfig or a compiler)."""
    name = ctypes.util.find_library("c")
    if name is None:
        return None
    found: Callable[..., int] | None = getattr(ctypes.CDLL(name, use_errno=True), function, None)
    return found


def exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths (Linux renameat2); False where unsupported."""
    fn = _libc("renameat2")
    if fn is None:
        return False
    rc = fn(_AT_FDCWD, os.fsencode(a), _AT_FDCWD, os.fsencode(b), _RENAME_EXCHANGE)
    return bool(rc == 0)


# From this many files on, one syncfs of their file system is cheaper than an fsync each
# (each fsync is a journal commit: 8,000 of them took about 8 s here, one syncfs 0.3 s).
SYNCFS_FROM = 64


def sync_files(paths: list[Path], directory: Path) -> None:
    """Make the written ``paths`` durable: one Linux syncfs on ``directory``'s file system
    when there are many and it is available, else an fsync each."""
    fn = _libc("syncfs") if len(paths) >= SYNCFS_FROM else None
    if fn is not None:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            if fn(fd) == 0:
                return
        finally:
            os.close(fd)
    for path in paths:
        fsync_path(path)
