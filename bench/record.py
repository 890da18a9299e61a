"""Where a bench keeps what it measured: ``bench/results/<name>-<time>.json``."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results"


def save(name: str, data: Any) -> Path:
    """Write ``data`` as ``bench/results/<name>-<time>.json``, say where, return the path."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{name}-{time.strftime('%Y%m%dT%H%M%S')}.json"
    out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {out}")
    return out
