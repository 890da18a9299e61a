"""Text for people: the outcome's text on stdout, its problem on stderr."""

from __future__ import annotations

from typing import TYPE_CHECKING, TextIO

if TYPE_CHECKING:
    from compiler.output.outcome import Outcome


def write(outcome: Outcome, out: TextIO, err: TextIO) -> None:
    if text := outcome.text():
        out.write(text if text.endswith("\n") else text + "\n")
    if problem := outcome.problem():
        err.write(f"standbyc: {problem}\n")
