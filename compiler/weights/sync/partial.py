"""A download's files on disk: the partial bytes with their running sha256, the
``.part.json`` beside them (what they should become, and the server's ETag), and a
finished file an earlier run left. Only regular files count, never a link: what a
download left, not what was planted.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from compiler.fsutil import read_regular, write_replacing

HASH_BLOCK = 8 << 20
META_CAP = 64 << 10  # a .part.json is a few fields


class Partial:
    """A partial download: its bytes so far and their running sha256."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sha = hashlib.sha256()
        self.size = _hash_prefix(path, self.sha)

    def restart(self) -> None:
        self.path.unlink(missing_ok=True)
        self.sha = hashlib.sha256()
        self.size = 0


def regular(path: Path) -> bool:
    """A regular file, not a link to one: what a download left, not what was planted."""
    return path.is_file() and not path.is_symlink()


def _hash_prefix(path: Path, hasher: Any) -> int:
    if not regular(path):
        return 0
    n = 0
    with path.open("rb") as f:
        while block := f.read(HASH_BLOCK):
            hasher.update(block)
            n += len(block)
    return n


def finished(path: Path, sha256: str) -> bool:
    """A regular file with this sha256: a download an earlier run finished and verified."""
    if not regular(path):
        return False
    h = hashlib.sha256()
    _hash_prefix(path, h)
    return h.hexdigest() == sha256


def read_meta(path: Path) -> dict[str, Any]:
    """A ``.part.json``: what a partial download should become (anything else: {})."""
    raw = read_regular(path, META_CAP)
    try:
        doc = json.loads(raw) if raw is not None else {}
    except (ValueError, RecursionError):
        return {}
    return doc if isinstance(doc, dict) else {}


def write_meta(path: Path, doc: dict[str, Any]) -> None:
    write_replacing(path, json.dumps(doc, sort_keys=True).encode())
