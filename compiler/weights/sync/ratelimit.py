"""A token bucket in bit/s: every byte a sync downloads or a publish uploads passes it,
so neither takes more than its share of the link, whatever the server or network allow."""

from __future__ import annotations

import time
from collections.abc import Callable

READ_SIZE = 1 << 20


class TokenBucket:
    """At most ``bits_per_second`` on average; bursts up to ``burst`` bytes.

    The bucket starts empty, so a transfer of N bytes takes at least
    ``(N - burst) / rate`` seconds.
    """

    def __init__(
        self,
        bits_per_second: float | None,
        *,
        burst_seconds: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate = bits_per_second / 8 if bits_per_second else None  # bytes/s
        self.burst = max(64 << 10, int(self.rate * burst_seconds)) if self.rate else READ_SIZE
        self.tokens = 0.0
        self.clock, self.sleep = clock, sleep
        self.last = clock()

    @property
    def read_size(self) -> int:
        return min(READ_SIZE, self.burst)

    def take(self, nbytes: int) -> None:
        if self.rate is None:
            return
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        self.tokens -= nbytes
        if self.tokens < 0:
            self.sleep(-self.tokens / self.rate)
