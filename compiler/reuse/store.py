"""The content-addressed store behind every reuse (``compiler.reuse``): a validator's pass
over exactly these bytes with exactly this tool and these schemas, and a spec's rendered
files from exactly this spec, this standbyc, these libraries and these templates.

Keys are SHA-256 over everything the result depends on, so a stale entry is never
found, only unused. Only successes are stored (a failure is recomputed, so its full report
is shown again). Entries live in one SQLite file (``cache.sqlite3``; write-ahead log, so
concurrent standbyc processes read and write it safely, and a crash loses at most the last
entries, never the file; entries of a kilobyte or more are zlib-compressed), and are read
as plain bytes or JSON, never as code. A cache another process holds locked is a miss at
once (a wait of at most ``BUSY_MS`` milliseconds, then none for the rest of the run).
``STANDBYC_CACHE=off`` turns the store off (``STANDBYC_REUSE=off`` turns off every reuse);
``STANDBYC_CACHE_DIR`` moves it (default ``$XDG_CACHE_HOME/standbyc/cache`` or
``~/.cache/standbyc/cache``).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sqlite3
import sys
import threading
import zlib
from functools import cache
from importlib import metadata
from pathlib import Path
from typing import Any

from compiler.fsutil import user_dir
from compiler.reuse.switch import enabled

VERSION = b"standbyc-cache-2"
BUSY_MS = 50  # how long a read or write waits for a lock another process holds
# The libraries whose versions shape what standbyc writes or reads back.
LIBRARIES = ("jinja2", "ruamel.yaml", "PyYAML", "pydantic", "standbyc")


_OFF = ("off", "0", "no", "false")


def root() -> Path | None:
    if not enabled() or os.environ.get("STANDBYC_CACHE", "").lower() in _OFF:
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


_digests: dict[tuple[str, int, int, int, int], str] = {}


def content_digest(path: Path) -> str:
    """The SHA-256 of the bytes at ``path`` (through symlinks), read once per process
    while its size, inode and times stay the same."""
    st = path.stat()
    stamp = (str(path), st.st_size, st.st_ino, st.st_mtime_ns, st.st_ctime_ns)
    if stamp not in _digests:
        _digests[stamp] = hashlib.sha256(path.read_bytes()).hexdigest()
    return _digests[stamp]


@cache
def code_digest() -> str:
    """The digest of standbyc itself: every file of the package (code, templates, pins),
    the Python it runs on and the versions of the libraries that shape its output."""
    versions = []
    for name in LIBRARIES:
        try:
            versions.append(f"{name}={metadata.version(name)}")
        except metadata.PackageNotFoundError:
            versions.append(f"{name}=-")
    libyaml = getattr(__import__("yaml"), "__with_libyaml__", False)
    return key(
        stamped_tree_digest(Path(__file__).resolve().parent.parent, Store("code")),
        sys.version,
        *versions,
        f"libyaml={libyaml}",
    )


def tree_digest(directory: Path) -> str:
    """Every file under ``directory``, reached as a reader of it reaches them (through
    symlinked files and directories, each real directory once): names and bytes, bytecode
    caches left out. A directory that does not exist has the digest of an empty one."""
    h = hashlib.sha256()
    if not directory.is_dir():
        return h.hexdigest()
    seen: set[str] = set()
    files: list[tuple[str, str]] = []
    for dirpath, dirnames, filenames in os.walk(directory, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:  # a symlink loop, or a second way to the same directory
            dirnames[:] = []
            continue
        seen.add(real)
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in filenames:
            path = Path(dirpath, name)
            if path.is_file():
                files.append((path.relative_to(directory).as_posix(), content_digest(path)))
    for rel, digest in sorted(files):
        h.update(rel.encode("utf-8", "surrogateescape") + b"\0" + bytes.fromhex(digest))
    return h.hexdigest()


def stamped_tree_digest(directory: Path, kept: Store) -> str:
    """``tree_digest`` of a large directory that rarely changes (the offline schemas),
    remembered under the names, sizes, inodes and times of its files: a run that finds
    them all as they were lists and stats the files instead of reading them; anything
    changed, added or removed reads them all again."""
    stamps: list[str] = []
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(directory, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:  # a symlink loop, as tree_digest guards against
            dirnames[:] = []
            continue
        seen.add(real)
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")  # as tree_digest
        for name in sorted(filenames):
            try:
                st = os.stat(os.path.join(dirpath, name))  # noqa: PTH116, PTH118
            except OSError:
                st = None
            stamp = "-" if st is None else (
                f"{st.st_size}:{st.st_ino}:{st.st_mtime_ns}:{st.st_ctime_ns}"
            )  # fmt: skip
            stamps.append(f"{dirpath}/{name}:{stamp}")
    k = key("tree-stamps", str(directory), *stamps)
    if (known := kept.get(k)) is not None:
        return known.decode()
    digest = tree_digest(directory)
    kept.put(k, digest.encode())
    return digest


DB_NAME = "cache.sqlite3"
_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS entries "
    "(area TEXT NOT NULL, k TEXT NOT NULL, v BLOB NOT NULL, PRIMARY KEY (area, k)) WITHOUT ROWID"
)
_RAW, _ZLIB = b"=", b"z"  # an entry's first byte: stored as is, or zlib-compressed
_COMPRESS_FROM = 1024
_local = threading.local()  # this thread's connections: (pid, directory) -> connection
_busy: set[tuple[int, Path]] = set()  # caches found locked by another process: not used again


def _connection(directory: Path) -> sqlite3.Connection | None:
    """This thread's connection to the cache in ``directory`` (None: it cannot be opened).
    Connections are per process and thread: a forked worker opens its own."""
    opened: dict[tuple[int, Path], sqlite3.Connection | None] = _local.__dict__.setdefault(
        "opened", {}
    )
    slot = (os.getpid(), directory)
    if slot in _busy:
        return None
    if slot not in opened:
        opened[slot] = _open(directory)
    return opened[slot]


def _failed(directory: Path | None, exc: sqlite3.Error) -> None:
    """After a failed statement: a cache another process holds locked is not asked again
    in this run (each statement would wait ``BUSY_MS`` again)."""
    if directory is not None and isinstance(exc, sqlite3.OperationalError) and "locked" in str(exc):
        _busy.add((os.getpid(), directory))


def _open(directory: Path) -> sqlite3.Connection | None:
    path = directory / DB_NAME
    for attempt in range(2):
        try:
            directory.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(path, timeout=BUSY_MS / 1000, isolation_level=None)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=NORMAL")  # no fsync per entry; WAL stays whole
            conn.execute(_SCHEMA)
            return conn
        except sqlite3.OperationalError as exc:  # locked, read-only, no space: no cache now
            _failed(directory, exc)
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
        except sqlite3.Error as exc:  # locked by another process, or damaged: a miss
            _failed(self.dir, exc)
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
        try:
            conn.execute(
                "INSERT OR REPLACE INTO entries (area, k, v) VALUES (?, ?, ?)",
                (self.area, k, stored),
            )
        except sqlite3.Error as exc:  # locked by another process, or the disk is full
            _failed(self.dir, exc)

    def put_json(self, k: str, value: Any) -> None:
        self.put(k, json.dumps(value, separators=(",", ":")).encode())
