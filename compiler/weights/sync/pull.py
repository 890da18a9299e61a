"""``standbyc weights sync``: bring a standby's model directory to a generation.

1. Read the index; find what the standby holds (cached, or read in full).
2. Plan: the weights by the route with the fewest bytes (kept as they are, deltas from
   the local weights, or an anchor and the deltas after it; one-step or merged); every other
   file kept (a file with its content is already there), patched, or downloaded whole.
3. Download what the plan needs (resumable, retried, rate-limited), each file checked
   against the index's size and sha256 before use.
4. Stage the whole next directory beside the target: weights rebuilt by the delta
   library (base checked before writing, every tensor and the target digest after) or
   linked from the current ones; every other file linked, patched or moved in, each
   checked against its sha256. Until the swap, the old directory is untouched.
5. Swap the staged directory (with ``verify``: once its own signature verifies, verify.py)
   with the old one in one atomic exchange: an engine sees the old or the new, never a mix.
6. Ask the tier's engines to load it (``reload``), remember the result beside the
   directory, and report.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from compiler.fsutil import exchange, fsync_path
from compiler.weights.apply import apply
from compiler.weights.errors import NoSpace, WeightsError
from compiler.weights.manifest import build_manifest
from compiler.weights.safetensors_io import INDEX_NAME, Checkpoint
from compiler.weights.sync.errors import (
    ApplyFailed,
    DiskFull,
    DownloadCorrupt,
    SignatureRefused,
    StoreError,
    StoreIncomplete,
)
from compiler.weights.sync.fetch import DISK_FULL, Fetcher, FetchStats, NotFound
from compiler.weights.sync.index import (
    INDEX,
    Generation,
    Index,
    PlainFile,
    StoredFile,
    WeightsInfo,
    read_index,
)
from compiler.weights.sync.patch import PATCH_CAP, apply_patch
from compiler.weights.sync.route import Route, plan_route
from compiler.weights.sync.standby import Current, StandbyDir
from compiler.weights.sync.verify import Verifier as Verify

KEEP, PATCH, WHOLE = "kept", "patched", "whole"
HOWS = (KEEP, PATCH, WHOLE)


class ReloadResult(Protocol):
    """What asking the engines gave (``reload.Outcome``)."""

    served: int | None
    pods: list[Any]  # the pods asked
    seconds: float  # how long asking them took

    @property
    def failed(self) -> int: ...

    def to_json(self) -> dict[str, Any]: ...

    def text(self) -> str: ...

    def record(self) -> dict[str, Any]: ...


Save = Callable[[dict[str, Any]], None]
# Called with the generation now on disk, the last record of what the engines serve, a
# way to keep a new record while it runs, and the published generations whose weights
# differ from this one's.
Reload = Callable[[int, dict[str, Any], Save, frozenset[str]], ReloadResult]


@dataclass
class SyncResult:
    target: Path
    generation: int
    previous: int | None = None
    found_by: str = ""  # how the current directory was found: cached, hashed, absent
    status: str = ""  # "current" or "updated"
    route: str = ""
    files: dict[str, list[str]] = field(default_factory=dict)  # kept/patched/whole -> names
    removed: list[str] = field(default_factory=list)  # local files the generation lacks
    fetch: FetchStats = field(default_factory=FetchStats)
    seconds: float = 0.0
    seconds_download: float = 0.0
    seconds_apply: float = 0.0  # staging, verifying and the swap
    reload: ReloadResult | None = None
    verified: dict[str, Any] | None = None  # what the signature covers; None: not verified
    reported: bool | None = None  # None: no Pushgateway given
    report_error: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "target": str(self.target),
            "generation": self.generation,
            "previous_generation": self.previous,
            "found_by": self.found_by,
            "status": self.status,
            "route": self.route,
            "files": self.files,
            "removed": self.removed,
            **self.fetch.to_json(),
            "seconds": round(self.seconds, 3),
            "seconds_download": round(self.seconds_download, 3),
            "seconds_apply": round(self.seconds_apply, 3),
            "reload": self.reload.to_json() if self.reload else None,
            "verified": self.verified,
            "reported": self.reported,
            "report_error": self.report_error,
        }

    def text(self) -> str:
        if self.status == "current":
            line = f"{self.target}: already at generation {self.generation} ({self.found_by})"
        else:
            was = "nothing" if self.previous is None else f"generation {self.previous}"
            line = (
                f"{self.target}: {was} -> generation {self.generation}; weights: {self.route}; "
                f"other files: {_counts(self.files)}; fetched {self.fetch.bytes_fetched} bytes "
                f"in {self.seconds:.2f} s"
            )
        if self.removed:
            line += (
                f"\nwarning: {len(self.removed)} file(s) that generation {self.generation} "
                f"does not hold left with the old directory: {', '.join(self.removed[:8])}"
            )
        line += f"\nsigned, verified with {self.verified['trust']}" if self.verified else ""
        if self.reload is not None:
            line += "\n" + self.reload.text()
        if self.reported is False:
            line += f"\nwarning: could not report to the Pushgateway: {self.report_error}"
        return line


def _counts(files: dict[str, list[str]]) -> str:
    return ", ".join(f"{len(v)} {k}" for k, v in files.items() if v) or "none"


def _published(fetcher: Fetcher) -> Index:
    """The store's index; a store without one has nothing to sync to."""
    index = read_index(fetcher)
    if index is None:
        raise StoreError(f"{fetcher.url(INDEX)}: the store has no index (nothing published)")
    return index


# --- the plan ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileStep:
    file: PlainFile
    how: str  # KEEP, PATCH or WHOLE
    local: str = ""  # KEEP: the local file with its content; PATCH: the patch's base

    @property
    def download(self) -> StoredFile | None:
        if self.how == WHOLE:
            return self.file.stored
        if self.how == PATCH and self.file.patch is not None:
            return self.file.patch.file
        return None


def plan_files(gen: Generation, current: Current) -> list[FileStep]:
    have = current.by_sha()
    out = []
    for f in gen.files:
        if f.sha256 in have:
            out.append(FileStep(f, KEEP, have[f.sha256]))
        elif f.patch is not None and f.patch.base_sha256 in have and f.size <= PATCH_CAP:
            out.append(FileStep(f, PATCH, have[f.patch.base_sha256]))
        else:
            out.append(FileStep(f, WHOLE))
    return out


def _download(
    fetcher: Fetcher, local: StandbyDir, route: Route, steps: list[FileStep]
) -> dict[str, Path]:
    """Every file the plan needs, verified; by store path."""
    files = list(route.anchor.anchor) if route.anchor else []
    files += [g.delta.file for g in route.deltas if g.delta is not None]
    files += [f for s in steps if (f := s.download) is not None]
    got: dict[str, Path] = {}
    for f in files:
        if f.path not in got:
            got[f.path] = fetcher.download(f, local.downloads)
    return got


# --- staging -------------------------------------------------------------------------------


def _link_or_copy(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        shutil.copyfile(src, dest)


def _assemble_anchor(
    local: StandbyDir, index: Index, anchor: Generation, got: dict[str, Path]
) -> Path:
    """The downloaded anchor as a checkpoint in work/, checked against its digest."""
    where = local.work / f"anchor-{anchor.number}"
    where.mkdir(parents=True)
    for f in anchor.anchor:
        got[f.path].replace(where / f.name)
    path = _checkpoint_in(where, anchor.weights.names)
    ckpt = Checkpoint(path)
    try:
        digest = build_manifest(ckpt, index.chunk_size).digest
    finally:
        ckpt.close()
    if digest != anchor.weights.digest:
        raise DownloadCorrupt(
            f"anchor {anchor.number}: checkpoint digest {digest}, the index says "
            f"{anchor.weights.digest}"
        )
    return path


def _checkpoint_in(directory: Path, names: tuple[str, ...]) -> Path:
    """The checkpoint path the delta library reads for weights ``names`` in ``directory``."""
    return directory if names[0] == INDEX_NAME else directory / names[0]


def _out_path(local: StandbyDir, name: str, weights: WeightsInfo) -> Path:
    """A fresh checkpoint path in work/ for the delta library to write."""
    where = local.work / name
    if weights.sharded:
        return where
    where.mkdir(parents=True, exist_ok=True)
    return where / weights.names[0]


@dataclass(frozen=True)
class _Stage:
    """One update: what the standby holds, the plan, and the verified downloads."""

    local: StandbyDir
    index: Index
    route: Route
    steps: list[FileStep]
    current: Current
    got: dict[str, Path]
    verify: Verify | None = None


def _stage_weights(st: _Stage, nxt: Path) -> None:
    local, index, route, current, got = st.local, st.index, st.route, st.current, st.got
    gen = index.generations[route.target]
    names = gen.weights.names
    if route.keeps_local:
        # Same checkpoint digest: the same bytes (a lone file's name may differ).
        for have, want in zip(current.weights_names, names, strict=True):
            _link_or_copy(local.target / have, nxt / want)
        return
    if route.anchor is not None:
        base = _assemble_anchor(local, index, route.anchor, got)
    else:
        base = _checkpoint_in(local.target, current.weights_names)
    for gen_step in route.deltas:
        assert gen_step.delta is not None
        out = _out_path(local, f"gen-{gen_step.number}", gen_step.weights)
        stats = apply(base, got[gen_step.delta.file.path], out)
        if stats.target_digest != gen_step.weights.digest:
            raise ApplyFailed(
                f"{gen_step.delta.file.path}: rebuilt weights with digest "
                f"{stats.target_digest}, the index says {gen_step.weights.digest}"
            )
        base = out
    if gen.weights.sharded:
        for name in names:
            (base / name).replace(nxt / name)
    else:
        base.replace(nxt / names[0])


def _stage_files(local: StandbyDir, steps: list[FileStep], got: dict[str, Path], nxt: Path) -> None:
    placed: dict[str, Path] = {}  # store path -> where its download went first
    for s in steps:
        dest = nxt / s.file.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if s.how == KEEP:
            _link_or_copy(local.target / s.local, dest)
        elif s.how == PATCH:
            assert s.file.patch is not None
            base = (local.target / s.local).read_bytes()
            if _sha(base) != s.file.patch.base_sha256:
                raise ApplyFailed(f"{local.target / s.local}: changed during the sync")
            out = apply_patch(base, got[s.file.patch.file.path].read_bytes(), s.file.size,
                              s.file.patch.file.path)  # fmt: skip
            if _sha(out) != s.file.sha256:
                raise ApplyFailed(
                    f"{s.file.patch.file.path}: the patched {s.file.name} does not have the "
                    "sha256 the index gives"
                )
            _write(dest, out)
        else:
            path = s.file.stored.path
            if path in placed:
                _link_or_copy(placed[path], dest)
            else:
                got[path].replace(dest)
                placed[path] = dest


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write(path: Path, data: bytes) -> None:
    with path.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _check_staged(nxt: Path, gen: Generation) -> None:
    """The staged directory holds exactly the generation's files, at their sizes (their
    bytes were each verified as they were placed)."""
    want = dict.fromkeys(gen.weights.names) | {f.name: f.size for f in gen.files}
    have: dict[str, int] = {}
    for root, _, files in os.walk(nxt):
        for name in files:
            path = Path(root) / name
            have[path.relative_to(nxt).as_posix()] = path.stat().st_size
    if set(have) != set(want):
        extra = sorted(set(have) ^ set(want))
        raise ApplyFailed(f"{nxt}: the staged directory differs from the index at {extra[:3]}")
    for name, size in want.items():
        if size is not None and have[name] != size:
            raise ApplyFailed(f"{nxt / name}: {have[name]} bytes, the index says {size}")
    if sum(have[n] for n in gen.weights.names) != gen.weights.size:
        raise ApplyFailed(f"{nxt}: the weights' size differs from the index")


def _swap(nxt: Path, target: Path) -> None:
    """Make the staged directory the target in one atomic step."""
    for d in (nxt, *[p for p in nxt.rglob("*") if p.is_dir()]):
        fsync_path(d)
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise StoreError(f"{target}: not a directory; the model directory must be one")
    if target.exists():
        if not exchange(nxt, target):
            raise ApplyFailed(f"{target}: cannot swap directories atomically on this system")
        fsync_path(target.parent)
        shutil.rmtree(nxt, ignore_errors=True)  # the old directory, now at the staged path
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        nxt.replace(target)
        fsync_path(target.parent)


def _stage_and_swap(st: _Stage) -> dict[str, Any] | None:
    local = st.local
    gen = st.index.generations[st.route.target]
    nxt = local.work / "next"
    nxt.mkdir(parents=True)
    nxt.chmod(0o755)
    try:
        _stage_weights(st, nxt)
        _stage_files(local, st.steps, st.got, nxt)
        _check_staged(nxt, gen)
    except (DownloadCorrupt, ApplyFailed):
        raise
    except NoSpace as exc:
        raise DiskFull(f"{exc}; the old directory is kept") from None
    except WeightsError as exc:
        raise ApplyFailed(f"{local.target}: {exc}; the old directory is kept") from None
    verified = st.verify.check(local, nxt, gen.number) if st.verify else None  # or refused
    _swap(nxt, local.target)
    return verified


def _after(gen: Generation, current: Current) -> Current:
    return Current(
        gen.number,
        gen.digest,
        "updated",
        gen.weights.digest,
        gen.weights.names,
        {f.name: f.sha256 for f in gen.files},
    )


def _removed(index: Index, gen: Generation, current: Current, names: list[str]) -> list[str]:
    """Files the standby held that neither the generation it held nor the new one list:
    someone else's, gone with the old directory."""
    known = {*gen.weights.names, *(f.name for f in gen.files)}
    if current.generation is not None:
        before = index.generations[current.generation]
        known |= {*before.weights.names, *(f.name for f in before.files)}
    return sorted(n for n in names if n not in known)


def _update(
    fetcher: Fetcher, local: StandbyDir, result: SyncResult, index: Index, verify: Verify | None
) -> None:
    """Bring the directory to the generation (under the lock)."""
    target, generation = result.target, result.generation
    for attempt in (1, 2):
        current = local.current(index)
        result.previous, result.found_by = current.generation, current.how
        route = plan_route(index, current.weights_digest, generation)
        gen = index.generations[generation]
        if current.digest == gen.digest:
            result.verified = verify.check(local, target, generation) if verify else None
            if current.how == "hashed":
                local.remember(generation, current, local.served())
            local.announce(generation)
            result.status = "current"
            return
        steps = plan_files(gen, current)
        if verify is not None:
            verify.prefetch()  # the verifying process, started beside the rebuild
        result.route = route.reason
        result.files = {k: [s.file.name for s in steps if s.how == k] for k in HOWS}
        t1 = time.perf_counter()
        try:
            got = _download(fetcher, local, route, steps)
        except NotFound as missing:
            if attempt == 2:
                raise StoreIncomplete(
                    f"{missing}: the store answers 404 for a file its index lists (an index "
                    "uploaded before its files, or a generation pruned meanwhile)"
                ) from None
            index = _published(fetcher)  # pruned meanwhile: plan again on the new index
            continue
        t2 = time.perf_counter()
        names = [row[0] for row in local.signature()] if target.exists() else []
        result.verified = _stage_and_swap(_Stage(local, index, route, steps, current, got, verify))
        result.removed = _removed(index, gen, current, names)
        local.remember(generation, _after(gen, current), local.served())
        local.announce(generation)
        for path in got.values():
            path.unlink(missing_ok=True)
        shutil.rmtree(local.work, ignore_errors=True)
        result.seconds_download, result.seconds_apply = t2 - t1, time.perf_counter() - t2
        result.status = "updated"
        return


def sync(
    fetcher: Fetcher,
    result: SyncResult,
    *,
    lock_wait: float = 0.0,
    reload: Reload | None = None,
    on_index: Callable[[Index], None] | None = None,
    verify: Verify | None = None,
) -> SyncResult:
    """Bring ``result.target`` to ``result.generation``, filling in ``result`` as it goes
    (so a caller that catches an error still knows what the standby holds); ``on_index``
    sees the index as soon as it is read (to size the sync's budget)."""
    t0 = time.perf_counter()
    target, generation = result.target, result.generation
    result.fetch = fetcher.stats
    index = _published(fetcher)
    if on_index is not None:
        on_index(index)
    local = StandbyDir(target)
    with local.locked(lock_wait):
        local.check()
        local.clean_leftovers()
        try:
            _update(fetcher, local, result, index, verify)
        except BaseException as exc:
            # Nothing half-made stays: the staged directory and intermediate checkpoints
            # go; on a full disk the downloads too (they are what fills it), as after a
            # refusal.
            shutil.rmtree(local.work, ignore_errors=True)
            full = isinstance(exc, DiskFull) or (
                isinstance(exc, OSError) and exc.errno in DISK_FULL
            )
            if full or isinstance(exc, SignatureRefused):
                shutil.rmtree(local.downloads, ignore_errors=True)
                if full and not isinstance(exc, DiskFull):
                    raise DiskFull(
                        f"{target}: no space left on the device ({exc}); the old directory "
                        "is kept and the partial files are removed"
                    ) from None
            raise
        if result.status == "updated":
            with contextlib.suppress(OSError):
                local.remember_run("update", generation, bytes=result.fetch.bytes_fetched,
                                   seconds=round(time.perf_counter() - t0, 3))  # fmt: skip
        if reload is not None:
            state_now = local.current(index)

            def save(record: dict[str, Any]) -> None:
                with contextlib.suppress(OSError):
                    local.remember(generation, state_now, record)

            weights = index.generations[generation].weights.digest
            other = frozenset(
                str(g.number) for g in index.generations.values() if g.weights.digest != weights
            )
            result.reload = reload(generation, local.served(), save, other)
            save(result.reload.record())
            if result.reload.pods:
                with contextlib.suppress(OSError):
                    seconds = round(result.reload.seconds, 3)
                    local.remember_run("reload", generation, seconds=seconds)
    result.seconds = time.perf_counter() - t0
    return result
