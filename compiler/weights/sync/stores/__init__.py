"""Where a publish's files go: the ``StoreWriter`` protocol and one module per backend.

- ``directory``: the store is a local directory (``DirectoryStore``), and the directory
  operations every backend's local side uses (atomic writes, temp files, pruning);
- ``s3``: the store is a bucket (``S3Store``); the directory is a local cache of it. Its
  URLs, credentials and request signing are ``sync.s3access``, beside the sync's fetcher,
  which reads an ``s3://`` store with them too.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from compiler.weights.sync.errors import StoreError
from compiler.weights.sync.index import INDEX, Index

TOPS = ("anchors", "deltas", "manifests", "files", "patches")


class StoreWriter(Protocol):
    """Where a publish's files go. ``store`` is the local directory the publish writes
    into: the store itself, or a cache of a remote one."""

    def prepare(self, store: Path) -> None:
        """Before anything is read: the store's index (and what a delta or patch needs
        from the latest generation) into ``store``; refuse a store that lost its index."""

    def commit(self, store: Path, old: Index | None, new: Index, data: bytes) -> list[str]:
        """The new files, then ``data`` as the index (last), then remove what ``new`` no
        longer names; returns what was removed."""


def refuse_orphans(where: str, found: Sequence[str]) -> None:
    """A store without an index that holds store files lost its index (or is not
    empty for another reason): publishing would silently start a new history over it."""
    if found:
        raise StoreError(
            f"{where}: no {INDEX}, but it holds {', '.join(found)}: a store that lost its "
            f"index, or not an empty place; publish into an empty one (or restore {INDEX})"
        )
