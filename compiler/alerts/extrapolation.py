"""What Prometheus' ``rate()`` reads from a counter's samples at one evaluation, as its
``extrapolatedRate`` computes it (promql/functions.go): the increase between the first and
last sample in the window (counter resets added back), extrapolated to the window's edges
when the samples reach within 1.1 average intervals of them, else by half an interval.

The generated tests use it to place their checks where a real evaluation crosses a
threshold, also where evaluations fall between scrapes. Prometheus 3 selects the window
left-open, ``(t - W, t]``; Prometheus 2 (Debian's promtool) left-closed, ``[t - W, t]``: a
placement must hold under both.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

Sample = tuple[int, float]  # (time in ms, value)


def rate(samples: Sequence[Sample], at_ms: int, window_ms: int, *, left_open: bool) -> float:
    """Per-second rate at ``at_ms`` over ``window_ms``; 0.0 where rate() has no result
    (fewer than two samples in the window: the series is absent, so the alert is not true)."""
    start = at_ms - window_ms
    inside = [(t, v) for t, v in samples if (t > start if left_open else t >= start) and t <= at_ms]
    if len(inside) < 2:
        return 0.0
    (first_t, first_v), (last_t, last_v) = inside[0], inside[-1]
    increase = last_v - first_v
    increase += sum(prev for (_, prev), (_, cur) in itertools.pairwise(inside) if cur < prev)
    sampled = (last_t - first_t) / 1000
    average = sampled / (len(inside) - 1)
    to_start, to_end = (first_t - start) / 1000, (at_ms - last_t) / 1000
    if to_start >= 1.1 * average:
        to_start = average / 2
    if increase > 0 and first_v >= 0:  # a counter is never extrapolated below zero
        to_start = min(to_start, sampled * first_v / increase)
    if to_end >= 1.1 * average:
        to_end = average / 2
    return increase * (sampled + to_start + to_end) / sampled / (window_ms / 1000)


def bounds(samples: Sequence[Sample], at_ms: int, window_ms: int) -> tuple[float, float]:
    """The lowest and highest rate() either window convention reads at ``at_ms``."""
    both = [rate(samples, at_ms, window_ms, left_open=o) for o in (True, False)]
    return min(both), max(both)
