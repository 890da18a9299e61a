"""Options shared by the commands that compile specs, and what a command returns to run
another command line instead."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path

from compiler.output import add_format_option


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


def add_apiserver_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--apiserver",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="also server-side dry-run every object on a throwaway local kube-apiserver, at "
        "each Kubernetes version (default: STANDBYC_APISERVER=on turns it on; needs "
        "`standbyc tools install --optional`)",
    )


@dataclass(frozen=True)
class Rerun:
    """A command's answer meaning: run this standbyc command line instead (the Argo CD
    plugin's ``generate`` is exactly the ``compile`` it prints)."""

    argv: list[str]
