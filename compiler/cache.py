"""A content-addressed cache of work standbyc has already done, the way pre-commit caches
environments: a validator's pass over exactly these bytes with exactly this tool, and a
spec's rendered files from exactly this spec, this standbyc and these templates.

Keys are SHA-256 over everything the result depends on, so a stale entry is never
found, only unused. Only successes are stored (a failure is recomputed, so its full report
is shown again). Entries live in one SQLite file (``cache.sqlite3``; write-ahead log, so
concurrent standbyc processes read and write it safely, and a crash loses at most the last
entries, never the file; entries of a kilobyte or more are zlib-compressed), and are read
as plain bytes or JSON, never as code.
A cold run of many specs stores thousands of passes: one file per entry cost more than
half a millisecond each, a row costs some tens of microseconds. ``STANDBYC_CACHE=off``
turns the cache off; ``STANDBYC_CACHE_DIR`` moves it (default
``$XDG_CACHE_HOME/standbyc/cache`` or ``~/.cache/standbyc/cache``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import threading
import zlib
from functools import cache
from pathlib import Path
from typing import Any

VERSION = b"standbyc-cache-1"


def user_dir(name: str) -> Path:
    """``$XDG_CACHE_HOME/standbyc/<name>``, or ``~/.cache/standbyc/<name>``: where standbyc
    keeps what it builds for a user (this cache, tools, schemas)."""
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "standbyc" / name


def root() -> Path | None:
    if os.environ.get("STANDBYC_CACHE", "").lower() in ("off", "0", "no", "false"):
        return None
    explicit = os.environ.get("STANDBYC_CACHE_DIR")
    if explicit:
        return Path(explicit)
    return user_dir("cache")


def key(*parts: bytes | str) -> str:
    """A key over ``parts``, each length-prefixed so no two sequences collide."""
    h = hashlib.sha256(VERSION)
    for part in parts:
        data = part.encode("utf-8", "surrogatepass") if isinstance(part, str) else part
        h.update(len(data).to_bytes(8, "little"))
        h.update(data)
    return h.hexdigest()


def file_id(path: Path) -> str:
    """A program as a key part: its path, size and modification time (a rebuilt or
    replaced binary is a new tool)."""
    st = path.stat()
    return f"{path}:{st.st_size}:{st.st_mtime_ns}"


@cache
def code_digest() -> str:
    """The digest of standbyc itself: every file of the package (code, templates, pins)."""
    return tree_digest(Path(__file__).resolve().parent)


def tree_digest(directory: Path) -> str:
    """Every file under ``directory`` (names and bytes, bytecode caches left out); a
    directory that does not exist has the digest of an empty one."""
    h = hashlib.sha256()
    for path in sorted(directory.rglob("*")) if directory.is_dir() else ():
        if path.is_file() and "__pycache__" not in path.parts:
            h.update(path.relative_to(directory).as_posix().encode() + b"\0")
            h.update(hashlib.sha256(path.read_bytes()).digest())
    return h.hexdigest()


DB_NAME = "cache.sqlite3"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS entries "
    "(area TEXT NOT NULL, k TEXT NOT NULL, v BLOB NOT NULL, PRIMARY KEY (area, k)) WITHOUT ROWID"
)
_RAW, _ZLIB = b"=", b"z"  # an entry's first byte: stored as is, or zlib-compressed
_COMPRESS_FROM = 1024
_local = threading.local()  # this thread's connections: (pid, directory) -> connection


def _connection(directory: Path) -> sqlite3.Connection | None:
    """This thread's connection to the cache in ``directory`` (None: it cannot be opened).
    Connections are per process and thread: a forked worker opens its own."""
    opened: dict[tuple[int, Path], sqlite3.Connection | None] = _local.__dict__.setdefault(
        "opened", {}
    )
    slot = (os.getpid(), directory)
    if slot not in opened:
        opened[slot] = _open(directory)
    return opened[slot]


def _open(directory: Path) -> sqlite3.Connection | None:
    path = directory / DB_NAME
    for attempt in range(2):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(path, timeout=30, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # no fsync per entry; WAL stays whole
            conn.execute(_SCHEMA)
            return conn
        except sqlite3.OperationalError:  # locked too long, read-only, no space: no cache now
            break
        except sqlite3.DatabaseError:
            if attempt == 0 and path.is_file():  # not a database (damaged): start a new one
                _set_aside(path)
        except (OSError, sqlite3.Error):
            break
    return None


def _set_aside(path: Path) -> None:
    for suffix in ("", "-wal", "-shm"):
        damaged = path.with_name(path.name + suffix)
        with contextlib.suppress(OSError):
            damaged.replace(damaged.with_name(damaged.name + ".damaged"))


class Store:
    """One area of the cache (``gate``, ``compile``)."""

    def __init__(self, area: str) -> None:
        self.area = area
        self.dir = root()

    @property
    def enabled(self) -> bool:
        return self.dir is not None

    def _row(self, column: str, k: str) -> Any:
        """``column`` of ``k``'s row (None: no row, or no cache)."""
        conn = _connection(self.dir) if self.dir is not None else None
        if conn is None:
            return None
        try:
            return conn.execute(
                f"SELECT {column} FROM entries WHERE area = ? AND k = ?",
                (self.area, k),
            ).fetchone()
        except sqlite3.Error:  # locked for longer than the timeout, or damaged: a miss
            return None

    def get(self, k: str) -> bytes | None:
        row = self._row("v", k)
        if row is None:
            return None
        stored = bytes(row[0])
        if stored[:1] == _RAW:
            return stored[1:]
        if stored[:1] == _ZLIB:
            try:
                return zlib.decompress(stored[1:])
            except zlib.error:  # damaged: a miss
                return None
        return None  # not an entry this code wrote

    def has(self, k: str) -> bool:
        return self._row("1", k) is not None

    def get_json(self, k: str) -> Any:
        data = self.get(k)
        if data is None:
            return None
        try:
            return json.loads(data)
        except ValueError:  # a damaged entry is a miss
            return None

    def put(self, k: str, data: bytes = b"") -> None:
        """Store ``data`` under ``k``; a cache that cannot be written is silently skipped."""
        conn = _connection(self.dir) if self.dir is not None else None
        if conn is None:
            return
        # A rendering is some hundred kilobytes of YAML and JSON: compressed, a cold run
        # writes (and the staging step's syncfs flushes) about a twelfth of it.
        stored = _ZLIB + zlib.compress(data, 1) if len(data) >= _COMPRESS_FROM else _RAW + data
        with contextlib.suppress(sqlite3.Error):  # locked too long, or the disk is full
            conn.execute(
                "INSERT OR REPLACE INTO entries (area, k, v) VALUES (?, ?, ?)",
                (self.area, k, stored),
            )

    def put_json(self, k: str, value: Any) -> None:
        self.put(k, json.dumps(value, separators=(",", ":")).encode())
