"""``standbyc schema``: the StandbySpec JSON Schema, for editors and CI."""

from __future__ import annotations

import argparse
import json
import sys


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("schema", help="print the StandbySpec JSON Schema")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from compiler.admit import json_schema

    json.dump(json_schema(), sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
    return 0
