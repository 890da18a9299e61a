"""One output layer: a command builds an outcome, and one writer per format prints it.

Adding a format means adding one module with ``write(outcome, out, err)`` and a line in
``FORMATS``; every command that takes ``--format`` offers it.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from collections.abc import Callable
from typing import TextIO

from compiler.output import json_writer, junit_writer, text_writer
from compiler.output.outcome import Message, Outcome

__all__ = ["FORMATS", "Message", "Outcome", "Writer", "add_format_option", "emit"]


Writer = Callable[[Outcome, TextIO, TextIO], None]

FORMATS: dict[str, Writer] = {
    "text": text_writer.write,
    "json": json_writer.write,
    "junit": junit_writer.write,
}


def add_format_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format",
        choices=sorted(FORMATS),
        default="text",
        help="output format (default: text)",
    )


def emit(outcome: Outcome, fmt: str) -> int:
    """Print ``outcome`` in ``fmt``; return its exit code, even when the reader of stdout
    went away (``standbyc compile | head -1``): the command itself did what it said."""
    try:
        FORMATS[fmt](outcome, sys.stdout, sys.stderr)
        sys.stdout.flush()
    except BrokenPipeError:
        stdout_gone()
    return outcome.exit_code


def stdout_gone() -> None:
    """The reader of stdout went away: point stdout at /dev/null, so that the final flush
    at exit does not fail again."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
