"""Routes over a store's index: the fewest weight bytes from what a standby holds to a
generation, over one-step deltas, merged deltas and anchors (``plan_route``)."""

from __future__ import annotations

import heapq
from dataclasses import dataclass

from compiler.weights.sync.errors import StoreError
from compiler.weights.sync.index import Delta, Generation, Index, WeightsInfo


@dataclass(frozen=True)
class Step:
    """One delta of a route: it rebuilds ``generation``'s weights."""

    generation: Generation
    delta: Delta

    @property
    def number(self) -> int:
        return self.generation.number

    @property
    def weights(self) -> WeightsInfo:
        return self.generation.weights

    @property
    def merged(self) -> bool:
        return self.delta is not self.generation.delta


@dataclass(frozen=True)
class Route:
    """How to reach a generation's weights: keep the local ones, or an optional anchor to
    download, then deltas in order (one-step or merged)."""

    target: int
    start: int | None  # the generation the deltas start from (the anchor's, or the current)
    anchor: Generation | None
    deltas: tuple[Step, ...]  # applied in order
    reason: str = ""

    @property
    def keeps_local(self) -> bool:
        """The weights on the standby are the target's already."""
        return self.anchor is None and not self.deltas

    @property
    def nbytes(self) -> int:
        anchor = self.anchor.anchor_size if self.anchor else 0
        return anchor + sum(s.delta.file.size for s in self.deltas)

    def describe(self) -> str:
        if self.keeps_local:
            return "weights unchanged"
        steps = " -> ".join(str(s.number) for s in self.deltas)
        chain = f"{len(self.deltas)} delta(s) {self.start} -> {steps}" if self.deltas else ""
        merged = [f"{s.delta.base}-{s.number}" for s in self.deltas if s.merged]
        if merged:
            chain += f" (merged {', '.join(merged)})"
        if self.anchor is None:
            return f"chain of {chain}"
        head = f"anchor {self.anchor.number}"
        return f"{head} + {chain}" if chain else head


def _edges(index: Index, merged: bool) -> dict[int, list[Step]]:
    """The deltas out of each generation whose weights the index lists."""
    out: dict[int, list[Step]] = {}
    for gen in index.generations.values():
        for dl in [*([gen.delta] if gen.delta else []), *(gen.merged if merged else ())]:
            if dl.base in index.generations:
                out.setdefault(dl.base, []).append(Step(gen, dl))
    return out


_Starts = dict[int, tuple[int, Generation | None]]  # generation -> bytes, anchor fetched


def _cheapest(index: Index, starts: _Starts, target: int, merged: bool) -> Route | None:
    """Dijkstra over the deltas from ``starts`` (generation -> bytes to hold its weights,
    and the anchor fetched for it): the route with the fewest bytes, then fewest deltas."""
    edges = _edges(index, merged)
    heap = [(cost, 0, g) for g, (cost, _) in starts.items()]
    heapq.heapify(heap)
    best: dict[int, tuple[int, int]] = {g: (c, 0) for g, (c, _) in starts.items()}
    came: dict[int, Step] = {}
    while heap:
        cost, hops, g = heapq.heappop(heap)
        if (cost, hops) > best[g]:
            continue
        if g == target:
            break
        for step in edges.get(g, ()):
            key = (cost + step.delta.file.size, hops + 1)
            if key < best.get(step.number, (1 << 62, 0)):
                best[step.number] = key
                came[step.number] = step
                heapq.heappush(heap, (*key, step.number))
    if target not in best:
        return None
    path: list[Step] = []
    g = target
    while g in came:  # set only where a delta beat every way known before, a start's too
        path.append(came[g])
        g = came[g].delta.base
    return Route(target, g, starts[g][1], tuple(reversed(path)))


def plan_route(index: Index, weights: str | None, target: int, *, merged: bool = True) -> Route:
    """The fewest weight bytes to download to reach ``target``'s weights from the local
    weights with checkpoint digest ``weights`` (None: none usable), over one-step deltas,
    merged deltas (unless ``merged`` is False) and anchors."""
    if target not in index.generations:
        raise StoreError(
            f"generation {target} is not published in the store (latest is {index.latest})"
        )
    if weights is not None and index.generations[target].weights.digest == weights:
        return Route(target, target, None, (), "weights unchanged: 0 bytes")
    gens = index.generations.values()
    local: _Starts = {g.number: (0, None) for g in gens if g.weights.digest == weights}
    anchored: _Starts = {g.number: (g.anchor_size, g) for g in gens if g.anchor}
    candidates: list[Route] = []
    for starts in (local, anchored):
        route = _cheapest(index, starts, target, merged)
        if route is not None:
            candidates.append(route)
    if not candidates:
        raise StoreError(
            f"generation {target} cannot be reached: no anchor, and no delta chain from the "
            "weights the standby holds"
        )
    candidates.sort(key=lambda r: (r.nbytes, len(r.deltas)))
    best = candidates[0]
    why = f"{best.describe()}: {best.nbytes} bytes"
    if len(candidates) > 1:
        other = candidates[1]
        why += f", cheapest; next best {other.describe()}: {other.nbytes} bytes"
    return Route(best.target, best.start, best.anchor, best.deltas, why)
