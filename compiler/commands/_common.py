"""Options and steps shared by the commands that compile specs."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from compiler.outdir import Contents
    from compiler.pipeline import CompiledSpec


def add_compile_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="spec files or directories (default: specs/)",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("out"), help="output directory (default: out/)"
    )
    parser.add_argument(
        "--templates",
        type=Path,
        default=None,
        metavar="DIR",
        help="directory of templates that override the packaged ones, file by file",
    )
    add_format_option(parser)


def add_format_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--format", choices=("text", "json"), default="text", help="output format (default: text)"
    )


def desired_tree(
    args: argparse.Namespace, paths: list[Path] | None = None
) -> tuple[list[CompiledSpec], Contents, dict[str, str]]:
    """Compile ``paths`` (default: the specs on the command line) and merge with ``out/``."""
    from compiler import outdir, pipeline
    from compiler.render.base import Renderer

    if paths is None:
        paths = pipeline.discover(args.paths or [Path("specs")])
    renderer = Renderer(args.templates)
    current = outdir.read(args.out)
    compiled, desired = pipeline.build_tree(paths, renderer, current.owned)
    return compiled, current, desired


def emit_json(payload: dict[str, Any]) -> None:
    json.dump(payload, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")
