"""The one switch of every reuse: ``STANDBYC_REUSE=off`` runs every validator on every
input and renders every spec, with no store, no sharing and nothing passed on the side."""

from __future__ import annotations

import os

_OFF = ("off", "0", "no", "false")


def enabled() -> bool:
    """Whether standbyc may reuse work at all (read at each call: tests flip it)."""
    return os.environ.get("STANDBYC_REUSE", "").lower() not in _OFF
