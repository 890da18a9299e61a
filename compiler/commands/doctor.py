"""``standbyc doctor``: which validators and schema sets are present, and how to get the rest."""

from __future__ import annotations

import argparse

from compiler.output import add_format_option, emit


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "doctor", help="report which validators and schema sets are installed"
    )
    add_format_option(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from compiler.gate import health
    from compiler.gate import pins as pinfile

    pins = pinfile.load()
    statuses = [health.tool_status(n, pins) for n in (*pins.tools, "go")]
    return emit(health.DoctorOutcome(statuses, health.schema_status(pins)), args.format)
