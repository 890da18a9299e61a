"""A store in a local directory, and the directory operations every store's local side
uses: files written through a temp file and replaced atomically, the temp files a stopped
publish left, and pruning what an index no longer names.

``DirectoryStore`` is the ``StoreWriter`` of a store that is the directory itself (the
index replaced atomically, then pruned); ``DirectoryReader`` reads its keys for
``index.read_index``.
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from compiler.fsutil import fsync_path
from compiler.weights.sync.index import INDEX, Index, KeyAbsent
from compiler.weights.sync.stores import TOPS, refuse_orphans

TMP_MARK = ".standbyc-tmp-"


def tmp_path(path: Path) -> Path:
    """The temp file ``path`` is written through (``clean_leftovers`` finds it)."""
    return path.with_name(f".{path.name}{TMP_MARK}{os.getpid()}")


def write_atomic(path: Path, data: bytes) -> None:
    """``data`` as ``path``: a temp file, synced, then renamed over it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tmp_path(path)
    try:
        with tmp.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_path(path.parent)


def remove_unlisted(store: Path, index: Index | None) -> list[str]:
    """Remove every file of the store that ``index`` does not name (all, for None)."""
    listed = (
        {f.path for gen in index.generations.values() for f in gen.stored()} if index else set()
    )
    removed: list[str] = []
    for top in TOPS:
        root = store / top
        if not root.is_dir():
            continue
        for path in sorted(root.rglob("*"), key=str, reverse=True):
            rel = path.relative_to(store).as_posix()
            if path.is_file() and rel not in listed:
                path.unlink()
                removed.append(rel)
            elif path.is_dir() and not any(path.iterdir()):
                path.rmdir()
    return sorted(removed)


def clean_leftovers(store: Path) -> list[Path]:
    """Temp files and directories of a publish that stopped (we hold the lock)."""
    found = sorted(store.rglob(f"*{TMP_MARK}*"), key=str, reverse=True)
    for path in found:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return found


class DirectoryStore:
    """The store is the directory: the index replaced atomically, then pruned."""

    def prepare(self, store: Path) -> None:
        if not (store / INDEX).exists():
            refuse_orphans(str(store), [t for t in TOPS if (store / t).exists()])

    def commit(self, store: Path, old: Index | None, new: Index, data: bytes) -> list[str]:
        write_atomic(store / INDEX, data)
        return remove_unlisted(store, new)


@dataclass(frozen=True)
class DirectoryReader:
    """A store directory's keys, as files under ``root``."""

    root: Path

    def url(self, key: str) -> str:
        return str(self.root / key)

    def read(self, key: str, cap: int) -> bytes:
        """The whole file (``parse_index`` refuses one past its cap)."""
        path = self.root / key
        if not path.exists():
            raise KeyAbsent(self.url(key))
        return path.read_bytes()
