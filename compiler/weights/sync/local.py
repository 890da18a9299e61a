"""The standby's side of the disk: its model directory, and standbyc's state beside it.

For ``--target /weights/hot/llama`` the model directory is that directory; standbyc
keeps, beside it and never inside it::

    /weights/hot/.standbyc/llama/lock          one sync per target at a time (flock)
    /weights/hot/.standbyc/llama/state.json    generation, digests, and what the files
                                               looked like (size, times, inode) then
    /weights/hot/.standbyc/llama/downloads/    partial and finished downloads
    /weights/hot/.standbyc/llama/work/         intermediate checkpoints, and the next
                                               directory while it is staged

The current generation is read from ``state.json`` when every file still looks as it
did; otherwise the directory is read in full (the weights' checkpoint digest, every other
file's sha256) and its digest looked up in the index.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compiler.fsutil import exclusive
from compiler.weights.apply import remove_stale_temps
from compiler.weights.errors import WeightsError
from compiler.weights.manifest import build_manifest
from compiler.weights.safetensors_io import Checkpoint
from compiler.weights.sync.errors import SyncBusy
from compiler.weights.sync.modeldir import dir_digest, scan, sha256_file
from compiler.weights.sync.store import Index

STATE_DIR = ".standbyc"
STATE_FORMAT = "standbyc-sync-state"
STATE_VERSION = 2
# The standby's own copy is read without a cap on its other files: it came from the store.
_NO_CAP = 1 << 62


@dataclass(frozen=True)
class Current:
    """What the standby's directory holds."""

    generation: int | None  # None: nothing there, or nothing the store lists
    digest: str | None  # the whole directory's
    how: str  # "absent", "cached", "hashed", or why the directory could not be read
    weights_digest: str | None = None  # the weights' checkpoint digest, if readable
    weights_names: tuple[str, ...] = ()
    files: dict[str, str] = field(default_factory=dict)  # other files: name -> sha256

    def by_sha(self) -> dict[str, str]:
        """sha256 -> a local file with that content."""
        return {sha: name for name, sha in sorted(self.files.items())}


class Local:
    def __init__(self, target: Path) -> None:
        self.target = target
        self.state = target.parent / STATE_DIR / target.name
        self.downloads = self.state / "downloads"
        self.work = self.state / "work"

    def locked(self, wait: float = 0.0) -> contextlib.AbstractContextManager[None]:
        """Hold the target's lock, waiting up to ``wait`` seconds for another sync."""
        self.state.mkdir(parents=True, exist_ok=True)
        busy = SyncBusy(
            f"{self.target}: another sync of this target is still running after {wait:g} s "
            "(--lock-wait)"
        )
        return exclusive(self.state / "lock", busy, wait)

    def clean_leftovers(self) -> None:
        """Work of a sync that was killed (under the lock, so none is running): the staged
        directory and intermediate checkpoints, and the delta library's temp files. Partial
        downloads stay: the next download resumes them."""
        shutil.rmtree(self.work, ignore_errors=True)
        remove_stale_temps(self.target)

    def signature(self) -> list[list[Any]]:
        """Every file in the directory as it looks now (name, size, times, inode)."""
        out: list[list[Any]] = []
        for root, dirs, files in os.walk(self.target):
            dirs.sort()
            rel = os.path.relpath(root, self.target)
            for name in sorted(files):
                st = (Path(root) / name).lstat()
                path = name if rel == "." else f"{rel}/{name}"
                out.append([path, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino])
        return sorted(out)

    def current(self, index: Index) -> Current:
        if not self.target.exists():
            return Current(None, None, "absent")
        try:
            signature = self.signature()
        except OSError as exc:
            return Current(None, None, f"unreadable ({exc})")
        state = read_state(self.state / "state.json")
        if state is not None and state.get("signature") == signature:
            cached = _from_state(state, index)
            if cached is not None:
                return cached
        return _hashed(self.target, index)

    def remember(self, generation: int, current: Current, served: dict[str, Any]) -> None:
        doc = {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "generation": generation,
            "digest": current.digest,
            "weights": {"digest": current.weights_digest, "files": list(current.weights_names)},
            "files": current.files,
            "signature": self.signature(),
            "served": served,
        }
        tmp = self.state / "state.json.tmp"
        tmp.write_text(json.dumps(doc, sort_keys=True) + "\n")
        tmp.replace(self.state / "state.json")

    def restamp(self) -> None:
        """After staging was undone: the hard links it made into the directory and removed
        again changed its files' ctime (the link count), nothing else. Record the files as
        they look now if only that changed, so the state still says what the directory
        holds."""
        path = self.state / "state.json"
        state = read_state(path)
        if state is None or not isinstance(state.get("signature"), list):
            return
        now = self.signature()
        if [r[:3] + r[4:] for r in state["signature"]] != [r[:3] + r[4:] for r in now]:
            return
        state["signature"] = now
        tmp = self.state / "state.json.tmp"
        tmp.write_text(json.dumps(state, sort_keys=True) + "\n")
        tmp.replace(path)

    def served(self) -> dict[str, Any]:
        """What the engines were last confirmed to serve (``reload``'s record)."""
        state = read_state(self.state / "state.json")
        served = state.get("served") if state else None
        return served if isinstance(served, dict) else {}


def _hashed(target: Path, index: Index) -> Current:
    try:
        model = scan(target, excludes=(), max_file_size=_NO_CAP)
    except (OSError, WeightsError) as exc:
        return Current(None, None, f"unreadable ({exc})")
    files = {}
    for f in model.files:
        try:
            files[f.name] = sha256_file(f.path)
        except (OSError, WeightsError):
            continue  # not reusable; the rest may be
    try:
        ckpt = Checkpoint(model.checkpoint)
        try:
            weights = build_manifest(ckpt, index.chunk_size).digest
        finally:
            ckpt.close()
    except (OSError, WeightsError) as exc:
        return Current(None, None, f"unreadable ({exc})", files=files)
    sums = [(f.name, f.size, files[f.name]) for f in model.files if f.name in files]
    digest = (
        dir_digest(weights, model.weights.names, sums) if len(sums) == len(model.files) else None
    )
    return Current(index.by_digest(digest), digest, "hashed", weights, model.weights.names, files)


def _from_state(state: dict[str, Any], index: Index) -> Current | None:
    weights = state.get("weights")
    files = state.get("files")
    digest = state.get("digest")
    if not (isinstance(weights, dict) and isinstance(files, dict) and isinstance(digest, str)):
        return None
    names = weights.get("files")
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        return None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in files.items()):
        return None
    wd = weights.get("digest")
    return Current(
        index.by_digest(digest),
        digest,
        "cached",
        wd if isinstance(wd, str) else None,
        tuple(names),
        dict(files),
    )


def read_state(path: Path) -> dict[str, Any] | None:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if (
        not isinstance(doc, dict)
        or doc.get("format") != STATE_FORMAT
        or doc.get("version") != STATE_VERSION
    ):
        return None
    return doc


def held_generation(target: Path) -> int | None:
    """The generation ``state.json`` records for ``target``, if its files still look as
    they did then. Needs no index: for reporting when the store cannot be read."""
    local = Local(target)
    state = read_state(local.state / "state.json")  # unreadable: None
    if state is None or not isinstance(state.get("generation"), int):
        return None
    try:
        same = state.get("signature") == local.signature()
    except OSError:
        return None
    return int(state["generation"]) if same else None
