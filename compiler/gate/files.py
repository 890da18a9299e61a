"""Which files the gate reads: regular files of a bounded size, never a FIFO or a device."""

from __future__ import annotations

import os
import stat

# A file the gate reads must be a regular file (a symlink to one counts) of at most this:
# a FIFO would block the read forever, a link to /dev/zero never end it.
FILE_CAP = 64 << 20


def unreadable(path: str) -> str | None:
    """Why the gate will not read ``path`` (None: it will)."""
    try:
        st = os.stat(path)  # noqa: PTH116 - plain os: thousands of files per run
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if not stat.S_ISREG(st.st_mode):
        return "not a regular file (a FIFO, a device or a socket)"
    if st.st_size > FILE_CAP:
        return f"{st.st_size} bytes, over the {FILE_CAP}-byte limit of a file the gate reads"
    return None
