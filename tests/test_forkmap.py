"""fork_map gives what the plain loop gives, in order, in worker processes or not."""

from __future__ import annotations

import os

import pytest

from compiler.forkmap import fork_imap, fork_map


def _square_and_pid(x: int) -> tuple[int, int]:
    return x * x, os.getpid()


def test_forked_results_are_the_loops_in_order() -> None:
    items = list(range(40))
    got = fork_map(_square_and_pid, items, min_items=8, chunksize=3)
    assert [v for v, _ in got] == [x * x for x in items]
    if (os.cpu_count() or 1) >= 2:
        assert {pid for _, pid in got} - {os.getpid()}, "expected worker processes"


def test_few_items_run_here() -> None:
    got = fork_map(_square_and_pid, [1, 2, 3], min_items=8)
    assert got == [(1, os.getpid()), (4, os.getpid()), (9, os.getpid())]


def test_imap_yields_the_loops_results_in_order_as_they_are_taken() -> None:
    items = list(range(30))
    got = fork_imap(_square_and_pid, items, min_items=8, chunksize=2)
    assert next(got)[0] == 0
    assert [v for v, _ in got] == [x * x for x in items[1:]]
    here = fork_imap(_square_and_pid, [1, 2, 3], min_items=8)
    assert next(here) == (1, os.getpid())  # the first, before the others run


def _fail_at_three(x: int) -> int:
    if x == 3:
        raise ValueError("three")
    return x


def test_a_failed_item_raises_in_the_caller_in_order() -> None:
    got = fork_imap(_fail_at_three, list(range(40)), min_items=8, chunksize=1)
    assert [next(got) for _ in range(3)] == [0, 1, 2]
    with pytest.raises(ValueError, match="three"):
        next(got)
