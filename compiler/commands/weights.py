"""``standbyc weights``: manifest, diff, apply, verify for safetensors checkpoints.

Only the parser lives here; the implementation (numpy, zstandard, ...) is imported when a
weights command runs, so other commands start fast.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from pathlib import Path

from compiler.output import add_format_option
from compiler.weights import DEFAULT_CHUNK


def _lazy(name: str) -> Callable[[argparse.Namespace], int]:
    def run(args: argparse.Namespace) -> int:
        impl = importlib.import_module("compiler.weights.cli")
        result: int = getattr(impl, name)(args)
        return result

    return run


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("weights", help="lossless, verified safetensors deltas")
    wsub = p.add_subparsers(dest="weights_command", metavar="ACTION", parser_class=type(p))
    wsub.required = True

    m = wsub.add_parser("manifest", help="hash a checkpoint (file or sharded directory)")
    m.add_argument("path", type=Path, metavar="FILE|DIR")
    m.add_argument("-o", "--output", type=Path, help="write the manifest here (default stdout)")
    m.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK)
    add_format_option(m)
    m.set_defaults(func=_lazy("cmd_manifest"))

    d = wsub.add_parser("diff", help="write a delta from OLD (or its manifest) to NEW")
    d.add_argument("paths", type=Path, nargs="+", metavar="OLD NEW")
    d.add_argument("-o", "--output", type=Path, required=True, metavar="DELTA")
    d.add_argument(
        "--base-manifest",
        type=Path,
        metavar="M.json",
        help="diff against the standby's manifest instead of OLD's bytes",
    )
    d.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK)
    add_format_option(d)
    d.set_defaults(func=_lazy("cmd_diff"))

    a = wsub.add_parser("apply", help="rebuild NEW from BASE and a delta, verified")
    a.add_argument("base", type=Path, metavar="BASE")
    a.add_argument("delta", type=Path, metavar="DELTA")
    where = a.add_mutually_exclusive_group(required=True)
    where.add_argument("-o", "--output", type=Path, metavar="OUT")
    where.add_argument("--in-place", action="store_true", help="replace BASE atomically")
    a.add_argument(
        "--reread",
        action="store_true",
        help="before the rename, hash the written output again from the filesystem "
        "(its bytes are always hashed as they are written)",
    )
    add_format_option(a)
    a.set_defaults(func=_lazy("cmd_apply"))

    v = wsub.add_parser("verify", help="check a checkpoint against a manifest")
    v.add_argument("path", type=Path, metavar="FILE|DIR")
    v.add_argument("--manifest", type=Path, required=True, metavar="M.json")
    add_format_option(v)
    v.set_defaults(func=_lazy("cmd_verify"))
