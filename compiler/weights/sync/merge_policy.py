"""Publish-time merged deltas: from older generations straight to the latest.

A standby k generations behind would otherwise pull k one-step deltas, and consecutive
updates overlap (the same weights flip again), so the chain grows faster than the
direct delta. At each publish of L, walking back the one-step chain F1 = L-1, F2, ...,
the merged delta Fi -> L is ``merge(Fi -> Fi-1, Fi-1 -> L)``: one composition per
generation, no checkpoint read. Which ones the index keeps (docs/weight-sync.md):

* ``greedy`` (default): Fi -> L is kept only when the cheapest route without it
  (one-step deltas, the merged deltas kept so far, anchors) costs more than ``bound``
  times its size, so every standby within the window fetches at most ``bound`` times the
  direct delta, and no more than any route the store offers;
* ``all``: every one in the window;
* ``off``: none (the chain and anchors only).

Only the latest generation lists merged deltas: those into the one before are dropped
when the next is published. A composition that cannot be made (one that needs a
checkpoint, or a damaged delta in the store) ends the walk back; the publish goes on and
says why (``merge_stopped``), and older standbys take the chain.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path

from compiler.weights.compose import merge
from compiler.weights.deltafile import DeltaReader
from compiler.weights.errors import DeltaError
from compiler.weights.sync.errors import StoreError
from compiler.weights.sync.index import Delta, Generation, Index, StoredFile
from compiler.weights.sync.modeldir import sha256_file
from compiler.weights.sync.route import plan_route

SCHEMES = ("greedy", "all", "off")
DEFAULT_WINDOW = 64
DEFAULT_BOUND = 1.25


@dataclass(frozen=True)
class MergePolicy:
    scheme: str = "greedy"
    window: int = DEFAULT_WINDOW  # how many generations back
    bound: float = DEFAULT_BOUND  # the greedy scheme's cap on a route over the direct delta

    def check(self) -> MergePolicy:
        if self.scheme not in SCHEMES:
            raise StoreError(f"--merge {self.scheme!r}: must be one of {', '.join(SCHEMES)}")
        if not 0 <= self.window <= 4096:
            raise StoreError(f"--merge-window {self.window}: must be from 0 to 4096")
        if not 1.0 <= self.bound <= 100.0:
            raise StoreError(f"--merge-bound {self.bound}: must be from 1 to 100")
        return self


@dataclass
class MergeReport:
    made: int = 0  # compositions written
    kept: list[tuple[int, int]] = field(default_factory=list)  # (from, bytes) of each kept
    stopped: str = ""  # why the walk back ended early


def only_latest_merged(gens: dict[int, Generation]) -> dict[int, Generation]:
    """Merged deltas serve the latest generation only: drop everyone else's."""
    latest = max(gens)
    return {
        g: gen if g == latest or not gen.merged else replace(gen, merged=())
        for g, gen in gens.items()
    }


def merge_chain(index: Index, window: int) -> list[StoredFile]:
    """The one-step deltas the next publish's merges read: the latest generation's, then
    each one before it, while the index lists it (``window`` - 1 of them at most: the next
    publish's own delta is the window's first)."""
    out: list[StoredFile] = []
    gen = index.generations[index.latest]
    while len(out) < window - 1 and gen.delta is not None:
        out.append(gen.delta.file)
        if (before := index.generations.get(gen.delta.base)) is None:
            break
        gen = before
    return out


def add_merged(
    store: Path, index: Index, policy: MergePolicy, tmp_mark: str
) -> tuple[Index, MergeReport]:
    """``index`` with merged deltas into its latest generation, written into ``store``
    (temp files carry ``tmp_mark``, so a publish that stops leaves nothing it names)."""
    report = MergeReport()
    gens = index.generations
    latest = gens[index.latest]
    if policy.scheme == "off" or latest.delta is None:
        return index, report
    merged: list[Delta] = []
    prev = latest.delta  # the composition so far: Fi-1 -> L, as one delta file
    prev_path, prev_tmp = store / prev.file.path, False
    try:
        for _ in range(policy.window - 1):
            step = gens.get(prev.base)
            if step is None or step.delta is None or step.delta.base not in gens:
                break
            base = step.delta.base
            if not (store / step.delta.file.path).is_file():  # a cache without it (s3://)
                report.stopped = f"generation {base}: {step.delta.file.path} is not in {store}"
                break
            rel = f"deltas/{base}-{latest.number}.delta"
            path = store / "deltas" / f".{base}-{latest.number}.delta{tmp_mark}{os.getpid()}"
            try:
                merge(store / step.delta.file.path, prev_path, path)
            except DeltaError as exc:  # MergeImpossible, or a damaged delta in the store
                report.stopped = f"generation {base}: {exc}"
                break
            report.made += 1
            size = path.stat().st_size
            cand = Delta(base, StoredFile(rel, size, "0" * 64), gens[base].weights.digest,
                         latest.weights.digest)  # fmt: skip
            kept = _wanted(index, latest, merged, cand, policy)
            if kept:
                path = path.replace(store / rel)
                cand = _verified(path, cand)
                merged.append(cand)
                report.kept.append((base, size))
            if prev_tmp:
                prev_path.unlink()
            prev, prev_path, prev_tmp = cand, path, not kept
    finally:
        if prev_tmp:
            prev_path.unlink(missing_ok=True)
    out = replace(latest, merged=tuple(merged))
    return Index(index.chunk_size, {**gens, latest.number: out}), report


def _wanted(
    index: Index, latest: Generation, merged: list[Delta], cand: Delta, policy: MergePolicy
) -> bool:
    if policy.scheme == "all":
        return True
    trial = Index(
        index.chunk_size,
        {**index.generations, latest.number: replace(latest, merged=tuple(merged))},
    )
    digest = index.generations[cand.base].weights.digest
    try:
        without = plan_route(trial, digest, latest.number).nbytes
    except StoreError:
        return True  # no other route at all
    return without > policy.bound * cand.file.size


def _verified(path: Path, cand: Delta) -> Delta:
    """Read the merged delta back as a standby would, before the index names it."""
    reader = DeltaReader(path)
    try:
        reader.verify_payload()
        hdr = reader.header
    finally:
        reader.close()
    if (hdr.base_digest, hdr.target_digest) != (cand.base_digest, cand.target_digest):
        raise StoreError(f"{path}: merged delta is for {hdr.base_digest} -> {hdr.target_digest}")
    return replace(cand, file=replace(cand.file, sha256=sha256_file(path)))
