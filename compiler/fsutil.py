"""File-system steps shared by the writers of out/, of a store and of a standby's weights."""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import fcntl
import functools
import os
import stat
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from compiler.errors import UsageError


def user_dir(name: str) -> Path:
    """``$XDG_CACHE_HOME/standbyc/<name>``, or ``~/.cache/standbyc/<name>``: where standbyc
    keeps what it builds for a user (its cache, tools, schemas)."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "standbyc" / name


def resolved(path: Path) -> Path:
    """``path.resolve()``, or a UsageError naming the path when it cannot be resolved (a
    symlink loop, which pathlib reports as a RuntimeError)."""
    try:
        return path.resolve()
    except (RuntimeError, OSError) as exc:
        raise UsageError(f"{path}: cannot be resolved ({exc}): a symlink loop?") from None


def _flock(fd: int, op: int, wait: float, busy: Exception) -> None:
    """Take flock ``op`` on ``fd``, retrying for ``wait`` seconds; then raise ``busy``."""
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, op | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() >= deadline:
                raise busy from None
            time.sleep(0.05)


@contextlib.contextmanager
def exclusive(path: Path, busy: Exception, wait: float = 0.0) -> Iterator[None]:
    """Hold an exclusive flock on ``path`` (a directory, or a lock file created if needed);
    raise ``busy`` if another process still holds it after ``wait`` seconds. The kernel
    drops the lock when the holder dies, so a killed run never leaves a stale lock."""
    # A lock file is never a link: a planted one would have the lock created where it points.
    if path.is_dir():
        flags = os.O_RDONLY | os.O_DIRECTORY
    else:
        flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK
    fd = os.open(path, flags, 0o644)
    try:
        _flock(fd, fcntl.LOCK_EX, wait, busy)
        yield
    finally:
        os.close(fd)  # releases the lock


@contextlib.contextmanager
def shared(path: Path, wait: float, busy: Exception) -> Iterator[None]:
    """Hold a shared flock on the directory ``path``: readers together, never while a
    writer holds ``exclusive`` on it. Waits up to ``wait`` seconds for the writer, then
    raises ``busy``."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _flock(fd, fcntl.LOCK_SH, wait, busy)
        yield
    finally:
        os.close(fd)


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


# Files in a directory others may write (a tier's state beside its model directory) are
# created afresh and opened without following a link: a link planted there would have the
# writer truncate or fill the file it points to, with the writer's rights.
_NEW = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


def write_replacing(path: Path, data: bytes) -> None:
    """``data`` as ``path``: through ``<path>.tmp``, unlinked first (a stale one, or a
    planted link, goes; its target is untouched), created with O_EXCL and O_NOFOLLOW, then
    renamed over ``path`` (a rename replaces a link itself, never its target)."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.unlink(missing_ok=True)
    fd = os.open(tmp, _NEW, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    tmp.replace(path)


def open_append(path: Path) -> int:
    """A file descriptor appending to ``path`` (created if missing), never through a link."""
    return os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC,
                   0o644)  # fmt: skip


def read_regular(path: Path, cap: int) -> bytes | None:
    """The bytes of ``path`` if it is a regular file of at most ``cap`` bytes, else None (a
    link, a FIFO, a directory, a device, a larger file, or none). A FIFO is opened without
    blocking and not read, so no writer it waits for can hang the caller."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_size > cap:
            return None
        data = bytearray()
        while len(data) <= cap and (block := os.read(fd, min(1 << 20, cap + 1 - len(data)))):
            data += block
        return bytes(data) if len(data) <= cap else None
    except OSError:
        return None
    finally:
        os.close(fd)
