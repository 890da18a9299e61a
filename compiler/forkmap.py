"""``fork_map``: a function over many items in forked worker processes, for the
CPU-bound loops of a large compile (rendering specs, proving test abstractions sound) and
of a merge of two weight deltas (composing tensors).

The items reach the workers by ``fork``, not by pickling: only positions go out and
results come back. Where there are too few items, one core, or no ``fork`` (not Linux),
the loop runs here, in order; the results are the same either way."""

from __future__ import annotations

import multiprocessing as mp
import os
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

T = TypeVar("T")
R = TypeVar("R")

_JOB: tuple[Callable[[Any], Any], Sequence[Any]] | None = None  # what the workers inherit


def _at(i: int) -> Any:
    assert _JOB is not None
    fn, items = _JOB
    return fn(items[i])


def fork_map(
    fn: Callable[[T], R], items: Sequence[T], *, min_items: int = 8, chunksize: int = 4
) -> list[R]:
    """``[fn(x) for x in items]``, in worker processes when that pays (``min_items`` or
    more items, at least two cores)."""
    return list(fork_imap(fn, items, min_items=min_items, chunksize=chunksize))


def fork_imap(
    fn: Callable[[T], R], items: Sequence[T], *, min_items: int = 8, chunksize: int = 4
) -> Iterator[R]:
    """``fork_map``'s results one at a time, in order, as the caller takes them: a caller
    that writes each away holds few at once."""
    global _JOB  # noqa: PLW0603 -- read by the forked workers
    workers = min(os.cpu_count() or 1, len(items) // 2)
    if len(items) < min_items or workers < 2 or "fork" not in mp.get_all_start_methods():
        yield from (fn(x) for x in items)
        return
    _JOB = (fn, items)
    try:
        with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as pool:
            try:
                yield from pool.map(_at, range(len(items)), chunksize=chunksize)
            except BaseException:  # a failed item, or a caller that stopped taking
                pool.shutdown(wait=True, cancel_futures=True)  # the rest are not run
                raise
    finally:
        _JOB = None
