"""``standbyc check``: exit 1, with a diff, when ``out/`` is not what compile would write."""

from __future__ import annotations

import argparse
import sys

from compiler import outdir
from compiler.commands._common import add_compile_options, desired_tree, emit_json
from compiler.errors import EXIT_FAILED


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("check", help="exit 1 with a diff when out/ is stale")
    add_compile_options(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    _, current, desired = desired_tree(args)
    text = outdir.diff(current.owned, desired, args.out.as_posix())
    stale = sorted(
        p for p in set(current.owned) | set(desired) if current.owned.get(p) != desired.get(p)
    )
    if args.format == "json":
        emit_json({"out": str(args.out), "fresh": not stale, "stale": stale, "diff": text})
    elif stale:
        sys.stdout.write(text)
        print(
            f"standbyc: {args.out}/ is stale ({len(stale)} files differ); run: standbyc compile",
            file=sys.stderr,
        )
    else:
        print(f"{args.out}/ is up to date")
    return EXIT_FAILED if stale else 0
