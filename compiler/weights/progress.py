"""A byte-progress bar on a TTY (rich), silence elsewhere."""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from rich.progress import (
    BarColumn,
    DownloadColumn,
    Progress,
    TextColumn,
    TimeRemainingColumn,
    TransferSpeedColumn,
)


@contextmanager
def byte_progress(label: str, total: int, enabled: bool) -> Iterator[Callable[[int], None] | None]:
    """Yield an ``advance(nbytes)`` callback, or None when not on a TTY."""
    if not enabled or not sys.stderr.isatty():
        yield None
        return
    columns = (
        TextColumn("{task.description}"), BarColumn(), DownloadColumn(),
        TransferSpeedColumn(), TimeRemainingColumn(),
    )  # fmt: skip
    with Progress(*columns, transient=True) as bar:
        task = bar.add_task(label, total=total)
        yield lambda n: bar.advance(task, n)
