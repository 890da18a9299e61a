"""JSON for machines: exactly one document on stdout, whatever the outcome."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from compiler.output.outcome import Outcome


def write(outcome: Outcome, out: TextIO, err: TextIO) -> None:
    """Every document says ``ok`` and ``exitCode``; one that is not ok says ``error`` too
    (what would go to stderr in text), whatever else the command puts in it."""
    del err  # the document says what went wrong; the exit code says that it did
    doc = dict(outcome.to_json())
    code = outcome.exit_code
    doc.setdefault("ok", code == 0)
    doc["exitCode"] = code
    if code != 0 and not doc.get("error"):
        doc["error"] = outcome.problem() or f"exit code {code}"
    json.dump(doc, out, indent=2, sort_keys=True)
    out.write("\n")
