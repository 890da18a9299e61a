"""``standbyc weights sync``: bring a standby's model directory to a generation.

1. Read the index; find what the standby holds (cached, or read in full).
2. Plan: the weights by the route with the fewest bytes (kept as they are, deltas from
   the local weights, or an anchor and the deltas after it; one-step or merged); every other
   file kept (a file with its content is already there), patched, or downloaded whole.
3. Download what the plan needs (resumable, retried, rate-limited), each file checked
   against the index's size and sha256 before use.
4. Stage the whole next directory beside the target (``stage``): weights rebuilt by the
   delta library (base checked before writing, every tensor and the target digest after)
   or linked from the current ones; every other file linked, patched or moved in, each
   checked against its sha256. Until the swap, the old directory is untouched.
5. Swap the staged directory (with ``verify``: once its own signature verifies, verify.py)
   with the old one in one atomic exchange: an engine sees the old or the new, never a mix.
6. Ask the tier's engines to load it (``reload``), remember the result beside the
   directory, and report.
"""

from __future__ import annotations

import contextlib
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from compiler.weights.errors import DiskFull
from compiler.weights.sync.errors import (
    SignatureRefused,
    StoreError,
    StoreIncomplete,
)
from compiler.weights.sync.fetch import DISK_FULL, Fetcher, FetchStats, NotFound
from compiler.weights.sync.index import (
    INDEX,
    Generation,
    Index,
    read_index,
)
from compiler.weights.sync.route import Route, plan_route
from compiler.weights.sync.stage import HOWS, FileStep, Stage, plan_files, stage_and_swap
from compiler.weights.sync.standby import Current, StandbyDir
from compiler.weights.sync.verify import Verifier as Verify


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
    """What a sync found, did and measured (the target and generation are the caller's)."""

    previous: int | None = None
    found_by: str = ""  # how the current directory was found: cached, hashed, absent
    status: str = ""  # "current", "updated", or "newer" (it holds a later one: left alone)
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

    def to_json(self, target: Path, generation: int) -> dict[str, Any]:
        """The document of this sync of ``target`` to ``generation``."""
        return {
            "target": str(target),
            "generation": generation,
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

    def text(self, target: Path, generation: int) -> str:
        if self.status == "newer":
            return (
                f"{target}: holds generation {self.previous}, later than {generation}: left "
                "as it is (a Job of an older spec; a deliberate rollback says --allow-rollback)"
            )
        if self.status == "current":
            line = f"{target}: already at generation {generation} ({self.found_by})"
        else:
            was = "nothing" if self.previous is None else f"generation {self.previous}"
            line = (
                f"{target}: {was} -> generation {generation}; weights: {self.route}; "
                f"other files: {_counts(self.files)}; fetched {self.fetch.bytes_fetched} bytes "
                f"in {self.seconds:.2f} s"
            )
        if self.removed:
            line += (
                f"\nwarning: {len(self.removed)} file(s) that generation {generation} "
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


@dataclass(frozen=True)
class _Run:
    """One sync: where the store is, which directory, to which generation."""

    fetcher: Fetcher
    local: StandbyDir
    generation: int
    verify: Verify | None
    allow_rollback: bool = False


def _update(run: _Run, result: SyncResult, index: Index) -> None:
    """Bring the directory to the generation (under the lock)."""
    fetcher, local, generation, verify = run.fetcher, run.local, run.generation, run.verify
    target = local.target
    for attempt in (1, 2):
        current = local.current(index)
        result.previous, result.found_by = current.generation, current.how
        later = current.generation is not None and current.generation > generation
        if later and not run.allow_rollback:
            # A late retry of an older generation's Job: never a rollback by accident.
            result.status = "newer"
            return
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
        result.verified = stage_and_swap(Stage(local, index, route, steps, current, got, verify))
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
    target: Path,
    generation: int,
    *,
    lock_wait: float = 0.0,
    reload: Reload | None = None,
    on_index: Callable[[Index], None] | None = None,
    verify: Verify | None = None,
    into: SyncResult | None = None,
    allow_rollback: bool = False,
) -> SyncResult:
    """Bring ``target`` to ``generation``; returns what the sync found and did.
    ``on_index`` sees the index as soon as it is read (to size the sync's budget). The
    result is filled in as the sync goes, into ``into`` when given: a caller that catches
    an error still knows what the standby holds. A standby that holds a later generation
    is left as it is (status "newer") unless ``allow_rollback``."""
    t0 = time.perf_counter()
    result = into if into is not None else SyncResult()
    result.fetch = fetcher.stats
    index = _published(fetcher)
    if on_index is not None:
        on_index(index)
    local = StandbyDir(target)
    with local.locked(lock_wait):
        local.check()
        local.clean_leftovers()
        try:
            _update(_Run(fetcher, local, generation, verify, allow_rollback), result, index)
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
        if reload is not None and result.status != "newer":
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
