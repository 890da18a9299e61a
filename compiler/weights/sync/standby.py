"""The standby's side of the disk: its model directory, and standbyc's state beside it.

For ``--target /weights/hot/llama`` the model directory is that directory; standbyc
keeps, beside it and never inside it::

    /weights/hot/.standbyc/llama/lock          one sync per target at a time (flock)
    /weights/hot/.standbyc/llama/state.json    generation, digests, and what the files
                                               looked like (size, times, inode) then
    /weights/hot/.standbyc/llama/last-sync.json    what the last update fetched and took,
                                               and how long the engines took to load it
    /weights/hot/.standbyc/llama/downloads/    partial and finished downloads
    /weights/hot/.standbyc/llama/work/         intermediate checkpoints, and the next
                                               directory while it is staged

The current generation is read from ``state.json`` when every file still looks as it
did; otherwise the directory is read in full (the weights' checkpoint digest, every other
file's sha256) and its digest looked up in the index.

Others may write the tier's directory too, so nothing there is trusted: each level of the
state directory must be a real directory, each entry above what a sync makes (a regular
file, a real directory) or the sync refuses before it writes (``StateDamaged``); files are
written through a fresh temporary file that is never a link, and ``state.json`` is read
bounded, as a regular file only, each field's type checked (anything else: no state).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compiler.fsutil import exclusive, read_regular, write_replacing
from compiler.names import GENERATION_FILE, SYNC_STATE_DIR
from compiler.weights.errors import WeightsError
from compiler.weights.manifest import build_manifest
from compiler.weights.ondisk import remove_stale_temps
from compiler.weights.safetensors_io import Checkpoint
from compiler.weights.sync.errors import StateDamaged, SyncBusy
from compiler.weights.sync.index import MAX_GENERATION, Index
from compiler.weights.sync.modeldir import dir_digest, scan, sha256_file

STATE_DIR = SYNC_STATE_DIR
STATE_FORMAT = "standbyc-sync-state"
STATE_VERSION = 2
# The standby's own copy is read without a cap on its other files: it came from the store.
_NO_CAP = 1 << 62
# state.json holds a row per file (at most modeldir.MAX_FILES): a larger one is not ours.
STATE_CAP = 64 << 20
# What a sync makes in its state directory: a regular file or a real directory each.
_FILE, _DIR = "a regular file", "a directory"
_ENTRIES = {"lock": _FILE, "state.json": _FILE, "state.json.tmp": _FILE,
            "last-sync.json": _FILE, "last-sync.json.tmp": _FILE,
            "verify.json": _FILE, "verify.json.tmp": _FILE,
            "downloads": _DIR, "work": _DIR}  # fmt: skip
# What the last update and reload took (a few numbers): read as any other state entry,
# never through a link, and never more than this.
LAST_SYNC, LAST_SYNC_CAP = "last-sync.json", 64 << 10


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


class StandbyDir:
    """A standby's model directory (``target``) and standbyc's state beside it."""

    def __init__(self, target: Path) -> None:
        self.target = target
        self.state = target.parent / STATE_DIR / target.name
        self.downloads = self.state / "downloads"
        self.work = self.state / "work"

    def locked(self, wait: float = 0.0) -> contextlib.AbstractContextManager[None]:
        """Hold the target's lock, waiting up to ``wait`` seconds for another sync."""
        self.target.parent.mkdir(parents=True, exist_ok=True)
        _real_dir(self.state.parent)
        _real_dir(self.state)
        _check_entry(self.state / "lock", _FILE)
        busy = SyncBusy(
            f"{self.target}: another sync of this target is still running after {wait:g} s "
            "(--lock-wait)"
        )
        return exclusive(self.state / "lock", busy, wait)

    def check(self) -> None:
        """Refuse (StateDamaged) a state directory entry a sync would write through: one
        that is not what a sync made. Under the lock, before anything is written."""
        for name, kind in _ENTRIES.items():
            _check_entry(self.state / name, kind)
        if self.downloads.is_dir():
            for entry in sorted(os.scandir(self.downloads), key=lambda e: e.name):
                _check_entry(Path(entry.path), _FILE)

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
        write_replacing(
            self.state / "state.json", (json.dumps(doc, sort_keys=True) + "\n").encode()
        )

    @property
    def generation_file(self) -> Path:
        return self.state / GENERATION_FILE

    def announce(self, generation: int) -> None:
        """Write the generation the model directory holds where an engine can read it when
        it starts (SGLang: ``--weight-version "$(cat <this file>)"``), so that a pod started
        after the swap reports the generation it loaded and is not asked to load it again.
        Written after the swap: a pod that starts in between reports the older generation
        and is asked once more, never the reverse."""
        text = f"{generation}\n".encode()
        if read_regular(self.generation_file, 64) != text:
            write_replacing(self.generation_file, text)  # 0644: engines run as other users

    def remember_run(self, part: str, generation: int, **numbers: float) -> None:
        """Record, in ``last-sync.json``, the last ``update`` (bytes, seconds) or
        ``reload`` (seconds): what the Job pushes, and the weight-report CronJob again."""
        doc = self.last_sync()
        doc[part] = {"generation": generation, **numbers}
        write_replacing(self.state / LAST_SYNC, (json.dumps(doc, sort_keys=True) + "\n").encode())

    def last_sync(self) -> dict[str, dict[str, float]]:
        """``remember_run``'s record ({} when there is none or it cannot be read)."""
        data = read_regular(self.state / LAST_SYNC, LAST_SYNC_CAP)
        try:
            doc = json.loads(data) if data is not None else {}
        except ValueError:
            return {}
        if not isinstance(doc, dict):
            return {}
        return {
            part: {k: v for k, v in entry.items() if isinstance(v, int | float)}
            for part, entry in doc.items()
            if part in ("update", "reload") and isinstance(entry, dict)
        }

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
        write_replacing(path, (json.dumps(state, sort_keys=True) + "\n").encode())

    def served(self) -> dict[str, Any]:
        """What the engines were last confirmed to serve (``reload``'s record); {} when
        the numbers it holds are not a generation and a count of pods."""
        state = read_state(self.state / "state.json")
        served = state.get("served") if state else None
        if not isinstance(served, dict):
            return {}
        generation, failed = served.get("generation"), served.get("failed")
        if generation is not None and not _generation(generation):
            return {}
        if failed is not None and not _count(failed, 1 << 20):
            return {}
        return served


def _real_dir(path: Path) -> None:
    """Make ``path`` (one level) unless it is there; refuse it unless a real directory."""
    with contextlib.suppress(FileExistsError):
        path.mkdir(0o755)
    _check_entry(path, _DIR)


def _check_entry(path: Path, kind: str) -> None:
    """Refuse ``path`` unless it is missing or ``kind`` (lstat: a link is never either)."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if stat.S_ISDIR(mode) if kind == _DIR else stat.S_ISREG(mode):
        return
    raise StateDamaged(
        f"{path}: {_kind(mode)}, where a sync keeps {kind}; a sync does not write through "
        "what it did not make. Remove it (and find out what put it there), then sync again"
    )


def _kind(mode: int) -> str:
    if stat.S_ISLNK(mode):
        return "a symbolic link"
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISREG(mode):
        return "a regular file"
    return "a device or socket"


def _hashed(target: Path, index: Index) -> Current:
    try:
        model = scan(target, excludes=(), max_file_size=_NO_CAP)
    except (OSError, WeightsError) as exc:
        return Current(None, None, f"unreadable ({exc})")
    files = {}
    for f in model.files:
        if f.path != target / f.name:
            # A link planted in the directory (standbyc writes none): never reused, and
            # the directory's digest unknown, so the next sync rebuilds without it.
            continue
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
    """``state.json`` when it is a regular file of at most STATE_CAP bytes whose every
    field has its type (numbers in their ranges); else None: no state, the directory is
    read in full."""
    raw = read_regular(path, STATE_CAP)
    if raw is None:
        return None
    try:
        doc = json.loads(raw)
    except (ValueError, RecursionError):
        return None
    if not (
        isinstance(doc, dict)
        and doc.get("format") == STATE_FORMAT
        and doc.get("version") == STATE_VERSION
        and _generation(doc.get("generation"))
        and (doc.get("digest") is None or isinstance(doc.get("digest"), str))
        and _weights(doc.get("weights"))
        and _str_map(doc.get("files"))
        and _signature(doc.get("signature"))
        and isinstance(doc.get("served", {}), dict)
    ):
        return None
    return doc


def _count(value: object, high: int) -> bool:
    """A JSON integer (not ``true``) from 0 to ``high``."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= high


def _stat_number(value: object) -> bool:
    """A size, time in ns (before 1970: negative) or inode: an integer within 64 bits."""
    return isinstance(value, int) and not isinstance(value, bool) and abs(value) < 1 << 64


def _generation(value: object) -> bool:
    return _count(value, MAX_GENERATION) and value != 0


def _weights(value: object) -> bool:
    if not isinstance(value, dict):
        return False
    names, digest = value.get("files"), value.get("digest")
    return (
        isinstance(names, list)
        and all(isinstance(n, str) for n in names)
        and (digest is None or isinstance(digest, str))
    )


def _str_map(value: object) -> bool:
    return isinstance(value, dict) and all(isinstance(v, str) for v in value.values())


def _signature(value: object) -> bool:
    """Rows of [name, size, mtime_ns, ctime_ns, inode], as ``StandbyDir.signature`` makes."""
    return isinstance(value, list) and all(
        isinstance(row, list)
        and len(row) == 5
        and isinstance(row[0], str)
        and all(_stat_number(n) for n in row[1:])
        for row in value
    )


def held_generation(target: Path) -> int | None:
    """The generation ``state.json`` records for ``target``, if its files still look as
    they did then. Needs no index: for reporting when the store cannot be read."""
    local = StandbyDir(target)
    state = read_state(local.state / "state.json")  # unreadable or mistyped: None
    if state is None:
        return None
    try:
        same = state.get("signature") == local.signature()
    except OSError:
        return None
    return int(state["generation"]) if same else None
