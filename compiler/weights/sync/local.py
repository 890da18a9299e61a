"""The standby's side of the disk: its checkpoint, and standbyc's state beside it.

For ``--target /weights/hot/llama`` the checkpoint is that directory (a store of
sharded checkpoints) or the one file in it (a store of one-file checkpoints), and
standbyc keeps, beside it and never inside it::

    /weights/hot/.standbyc/llama/lock          one sync per target at a time (flock)
    /weights/hot/.standbyc/llama/state.json    generation, digest, and what the files
                                               looked like (size, times, inode) then
    /weights/hot/.standbyc/llama/downloads/    partial and finished downloads
    /weights/hot/.standbyc/llama/work/         intermediate checkpoints of a chain

The current generation is read from ``state.json`` when every file still looks as it
did; otherwise the checkpoint is hashed in full and its digest looked up in the index.
"""

from __future__ import annotations

import contextlib
import json
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler.fsutil import exclusive
from compiler.weights.apply import remove_stale_temps
from compiler.weights.errors import WeightsError
from compiler.weights.manifest import build_manifest
from compiler.weights.safetensors_io import Checkpoint
from compiler.weights.sync.errors import SyncBusy
from compiler.weights.sync.publish import checkpoint_files
from compiler.weights.sync.store import Index, Layout

STATE_DIR = ".standbyc"
STATE_FORMAT = "standbyc-sync-state"


@dataclass(frozen=True)
class Current:
    generation: int | None  # None: nothing there, or nothing the store knows
    digest: str | None
    how: str  # "absent", "cached", "hashed", or why the checkpoint could not be read


class Local:
    def __init__(self, target: Path, layout: Layout) -> None:
        self.target = target
        self.layout = layout
        self.state = target.parent / STATE_DIR / target.name
        self.downloads = self.state / "downloads"
        self.work = self.state / "work"

    @property
    def checkpoint(self) -> Path:
        """The path the delta library reads and writes."""
        return self.target / self.layout.file if self.layout.file else self.target

    def checkpoint_in(self, directory: Path) -> Path:
        return directory / self.layout.file if self.layout.file else directory

    def locked(self) -> contextlib.AbstractContextManager[None]:
        self.state.mkdir(parents=True, exist_ok=True)
        busy = SyncBusy(f"{self.target}: another sync of this target is running")
        return exclusive(self.state / "lock", busy)

    def clean_leftovers(self) -> None:
        """Work of a sync that was killed (under the lock, so none is running): the
        intermediate checkpoints, and the library's temp files next to the checkpoint.
        Partial downloads stay: the next download resumes them."""
        shutil.rmtree(self.work, ignore_errors=True)
        remove_stale_temps(self.checkpoint)

    def _signature(self) -> list[list[Any]]:
        out: list[list[Any]] = []
        for path in checkpoint_files(self.checkpoint):
            st = path.stat()
            out.append([path.name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino])
        return out

    def current(self, index: Index) -> Current:
        if not self.checkpoint.exists():
            return Current(None, None, "absent")
        try:
            signature = self._signature()
        except (OSError, WeightsError) as exc:
            return Current(None, None, f"unreadable ({exc})")
        state = _read_state(self.state / "state.json")
        if state.get("files") == signature and isinstance(state.get("digest"), str):
            digest = str(state["digest"])
            return Current(index.by_digest(digest), digest, "cached")
        try:
            ckpt = Checkpoint(self.checkpoint)
            try:
                digest = build_manifest(ckpt, index.chunk_size).digest
            finally:
                ckpt.close()
        except (OSError, WeightsError) as exc:
            return Current(None, None, f"unreadable ({exc})")
        return Current(index.by_digest(digest), digest, "hashed")

    def remember(self, generation: int, digest: str) -> None:
        doc = {
            "format": STATE_FORMAT,
            "layout": self.layout.to_json(),
            "generation": generation,
            "digest": digest,
            "files": self._signature(),
        }
        tmp = self.state / "state.json.tmp"
        tmp.write_text(json.dumps(doc, sort_keys=True) + "\n")
        tmp.replace(self.state / "state.json")


def _read_state(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    if not isinstance(doc, dict) or doc.get("format") != STATE_FORMAT:
        return {}
    return doc


def held_generation(target: Path) -> int | None:
    """The generation ``state.json`` records for ``target``, if its files still look as
    they did then. Needs no index: for reporting when the store cannot be read."""
    state = _read_state(target.parent / STATE_DIR / target.name / "state.json")
    layout = state.get("layout")
    generation = state.get("generation")
    if not isinstance(layout, dict) or not isinstance(generation, int):
        return None
    name = layout.get("file")
    local = Local(target, Layout(name if isinstance(name, str) and "/" not in name else None))
    try:
        same = state.get("files") == local._signature()
    except (OSError, WeightsError):
        return None
    return generation if same else None
