"""``standbyc weights sync``: bring a standby's checkpoint to a generation from the store.

1. Read the index; find the generation the standby holds (cached, or hashed).
2. Pick the route with the fewest bytes: a chain of deltas from the current generation,
   or an anchor and the deltas after it.
3. Download its files (resumable, retried, rate-limited), each checked against the
   index's size and sha256 before use.
4. Apply the deltas through the delta library, which checks the base before writing and
   every tensor and the target digest before its atomic swap; an anchor is checked
   against its digest before it is swapped in. Until the swap, the old weights are
   untouched; after it, the new ones are complete.
5. Remember the result beside the checkpoint, and report the generation held.
"""

from __future__ import annotations

import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compiler.weights.apply import apply, swap_in
from compiler.weights.errors import WeightsError
from compiler.weights.manifest import build_manifest
from compiler.weights.safetensors_io import Checkpoint
from compiler.weights.sync.errors import ApplyFailed, DownloadCorrupt, StoreError
from compiler.weights.sync.fetch import Fetcher, FetchStats, NotFound
from compiler.weights.sync.local import Local
from compiler.weights.sync.store import (
    INDEX,
    INDEX_CAP,
    Generation,
    Index,
    Route,
    parse_index,
    plan_route,
)


@dataclass
class SyncResult:
    target: Path
    generation: int
    previous: int | None = None
    found_by: str = ""  # how the current generation was found: cached, hashed, absent
    status: str = ""  # "current" or "updated"
    route: str = ""
    fetch: FetchStats = field(default_factory=FetchStats)
    seconds: float = 0.0
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
            **self.fetch.to_json(),
            "seconds": round(self.seconds, 3),
            "reported": self.reported,
            "report_error": self.report_error,
        }

    def text(self) -> str:
        if self.status == "current":
            line = f"{self.target}: already at generation {self.generation} ({self.found_by})"
        else:
            line = (
                f"{self.target}: generation {self.previous} -> {self.generation} via "
                f"{self.route}; fetched {self.fetch.bytes_fetched} bytes in "
                f"{self.seconds:.2f} s"
            )
        if self.reported is False:
            line += f"\nwarning: could not report to the Pushgateway: {self.report_error}"
        return line


def read_index(fetcher: Fetcher) -> Index:
    try:
        raw = fetcher.read(INDEX, INDEX_CAP)
    except NotFound:
        raise StoreError(
            f"{fetcher.url(INDEX)}: the store has no index (nothing published)"
        ) from None
    return parse_index(raw, fetcher.url(INDEX))


def _download(fetcher: Fetcher, local: Local, route: Route) -> dict[str, Path]:
    """Every file the route needs, verified; by store path."""
    files = list(route.anchor.anchor) if route.anchor else []
    files += [g.delta.file for g in route.deltas if g.delta is not None]
    return {f.path: fetcher.download(f, local.downloads) for f in files}


def _assemble_anchor(local: Local, index: Index, anchor: Generation, got: dict[str, Path]) -> Path:
    """The downloaded anchor as a checkpoint in work/, checked against its digest."""
    where = local.work / f"anchor-{anchor.number}"
    where.mkdir(parents=True)
    for f in anchor.anchor:
        got[f.path].replace(where / f.name)
    path = local.checkpoint_in(where)
    ckpt = Checkpoint(path)
    try:
        digest = build_manifest(ckpt, index.chunk_size).digest
    finally:
        ckpt.close()
    if digest != anchor.digest:
        raise DownloadCorrupt(
            f"anchor {anchor.number}: checkpoint digest {digest}, the index says {anchor.digest}"
        )
    return path


def _step(local: Local, name: str) -> Path:
    """A checkpoint path in work/ for an intermediate generation."""
    where = local.work / name
    if local.layout.file:
        where.mkdir(parents=True, exist_ok=True)
    return local.checkpoint_in(where)


def _apply_route(local: Local, index: Index, route: Route, got: dict[str, Path]) -> None:
    if local.layout.file:
        local.target.mkdir(parents=True, exist_ok=True)
    base = local.checkpoint
    if route.anchor is not None:
        base = _assemble_anchor(local, index, route.anchor, got)
    if not route.deltas:
        swap_in(base, local.checkpoint)
        return
    for i, gen in enumerate(route.deltas):
        assert gen.delta is not None
        last = i == len(route.deltas) - 1
        out = local.checkpoint if last else _step(local, f"gen-{gen.number}")
        apply(base, got[gen.delta.file.path], None if out == base else out)
        base = out


def sync(fetcher: Fetcher, result: SyncResult) -> SyncResult:
    """Bring ``result.target`` to ``result.generation``, filling in ``result`` as it goes
    (so a caller that catches an error still knows what the standby holds)."""
    t0 = time.perf_counter()
    target, generation = result.target, result.generation
    result.fetch = fetcher.stats
    index = read_index(fetcher)
    local = Local(target, index.layout)
    with local.locked():
        local.clean_leftovers()
        for attempt in (1, 2):
            current = local.current(index)
            result.previous, result.found_by = current.generation, current.how
            route = plan_route(index, current.generation, generation)
            want = index.generations[generation].digest
            if current.digest == want:
                if current.how == "hashed":
                    local.remember(generation, want)
                result.status = "current"
                break
            result.route = route.reason
            try:
                got = _download(fetcher, local, route)
            except NotFound:
                if attempt == 2:
                    raise
                index = read_index(fetcher)  # pruned meanwhile: plan again on the new index
                continue
            try:
                _apply_route(local, index, route, got)
            except DownloadCorrupt:
                raise
            except WeightsError as exc:
                raise ApplyFailed(f"{target}: {exc}; the old weights are kept") from None
            local.remember(generation, want)
            for path in got.values():
                path.unlink(missing_ok=True)
            shutil.rmtree(local.work, ignore_errors=True)
            result.status = "updated"
            break
    result.seconds = time.perf_counter() - t0
    return result
