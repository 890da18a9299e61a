"""Which files the gate reads (regular files of a bounded size, never a FIFO or a device),
and how it reads their documents."""

from __future__ import annotations

import os
import stat
from typing import Any

import yaml

from compiler import yamlio

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


def read_documents(data: bytes) -> list[Any] | str:
    """The documents of a manifest as a YAML reader gives them: standbyc's strict reader
    first, then, for YAML it refuses but Kubernetes reads (an alias, a merge key, a
    duplicate key), PyYAML's; the error when neither can read it."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        return f"not UTF-8 ({exc})"
    try:
        return yamlio.read_back(text)
    except Exception:  # read it again with the fuller reader below
        pass
    try:
        return [d for d in yaml.safe_load_all(text) if d is not None]
    except Exception as exc:  # any reader error: name it
        return " ".join(str(exc).split())
