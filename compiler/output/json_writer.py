"""JSON for machines: exactly one document on stdout, whatever the outcome."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from compiler.output import Outcome


def write(outcome: Outcome, out: TextIO, err: TextIO) -> None:
    del err  # the document says what went wrong; the exit code says that it did
    json.dump(outcome.to_json(), out, indent=2, sort_keys=True)
    out.write("\n")
