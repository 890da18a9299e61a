"""A content-addressed cache of work standbyc has already done, the way pre-commit caches
environments: a validator's pass over exactly these bytes with exactly this tool, and a
spec's rendered files from exactly this spec, this standbyc and these templates.

Keys are SHA-256 over everything the result depends on, so a stale entry is never
found, only unused. Only successes are stored (a failure is recomputed, so its full report
is shown again). Entries are written atomically and read as plain bytes or JSON, never as
code. ``STANDBYC_CACHE=off`` turns the cache off; ``STANDBYC_CACHE_DIR`` moves it (default
``$XDG_CACHE_HOME/standbyc/cache`` or ``~/.cache/standbyc/cache``).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
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


class Store:
    """One area of the cache (``gate``, ``compile``)."""

    def __init__(self, area: str) -> None:
        base = root()
        self.dir = None if base is None else base / area

    @property
    def enabled(self) -> bool:
        return self.dir is not None

    def _path(self, k: str) -> Path:
        assert self.dir is not None
        return self.dir / k[:2] / k

    def get(self, k: str) -> bytes | None:
        if self.dir is None:
            return None
        # Plain os calls, not pathlib: the gate looks up thousands of keys per run.
        try:
            with open(os.path.join(self.dir, k[:2], k), "rb") as fh:  # noqa: PTH118, PTH123
                return fh.read()
        except OSError:
            return None

    def has(self, k: str) -> bool:
        return self.dir is not None and os.path.exists(os.path.join(self.dir, k[:2], k))  # noqa: PTH110, PTH118

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
        if self.dir is None:
            return
        path = self._path(k)
        tmp = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
            Path(tmp).replace(path)
        except OSError:  # remove our own temp only: other writers share the directory
            if tmp is not None:
                Path(tmp).unlink(missing_ok=True)

    def put_json(self, k: str, value: Any) -> None:
        self.put(k, json.dumps(value, separators=(",", ":")).encode())
