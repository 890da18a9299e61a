"""What a store keeps of its generations after a publish.

Anchors kept: by drift, a generation whose one-step deltas since the previous kept anchor
add up to more than ``anchor_drift`` of its weights, or that is ``anchor_every``
generations after it (with ``anchor_drift`` 0: every ``anchor_every``-th generation);
also the oldest generation in the index (so every listed generation can be reached from
an anchor by deltas) and the latest (so the next publish can diff against it).
Generations older than the last ``keep`` are dropped, except those the remaining ones
need; merged deltas are kept into the latest generation only.
"""

from __future__ import annotations

from dataclasses import replace

from compiler.weights.sync.errors import StoreError
from compiler.weights.sync.index import Generation
from compiler.weights.sync.merge_policy import only_latest_merged


def anchors_to_keep(gens: dict[int, Generation], anchor_every: int, drift: float) -> set[int]:
    """The oldest and the latest, and by drift: a generation whose one-step deltas since
    the previous kept anchor add up to more than ``drift`` of its weights, or that is
    ``anchor_every`` generations after it. An anchor dropped before is not made again, so
    the choice only depends on the generations since the oldest (itself anchored)."""
    ordered = sorted(gens)
    ends = {ordered[0], ordered[-1]}
    if drift <= 0:
        return {g for g in ordered if g % anchor_every == 0} | ends
    kept, chain, count = set(ends), 0, 0
    for g in ordered[1:-1]:
        gen = gens[g]
        chain += gen.delta.file.size if gen.delta else gen.weights.size
        count += 1
        if gen.anchor and (chain > drift * gen.weights.size or count >= anchor_every):
            kept.add(g)
            chain = count = 0
    return kept


def prune(
    gens: dict[int, Generation], keep: int, anchor_every: int, drift: float = 0.0
) -> dict[int, Generation]:
    """Drop generations older than the last ``keep``, but keep an anchored start for the
    oldest kept one; drop anchors that are no longer needed, and merged deltas into any
    generation but the latest."""
    ordered = sorted(gens)
    window = ordered[-keep:]
    start = window[0]
    # Walk back to an anchored generation: the oldest listed one always is.
    while not gens[start].anchor:
        delta = gens[start].delta
        prev = delta.base if delta is not None else None
        if prev is None or prev not in gens:
            raise StoreError(f"generation {start} cannot be reached from any anchor")
        start = prev
    kept = only_latest_merged({g: gens[g] for g in ordered if g >= start})
    anchors = anchors_to_keep(kept, anchor_every, drift)
    return {g: gen if g in anchors else replace(gen, anchor=()) for g, gen in kept.items()}
