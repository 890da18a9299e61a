"""``standbyc validate [DIR]``: the validation gate over a tree laid out like ``out/``."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compiler.commands._common import add_format_option
from compiler.errors import EXIT_FAILED, EXIT_OK, UsageError
from compiler.gate import run_gate


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="validate manifests with kubeconform, rules with promtool (and pint), offline",
        description=(
            "Run kubeconform over every manifest for each Kubernetes version, promtool check "
            "rules on every PrometheusRule, pint if installed, and promtool test rules on "
            "every tests/*.test.yaml. Exit 1 on any finding."
        ),
    )
    parser.add_argument(
        "dir", nargs="?", default="out", help="directory to validate (default: out)"
    )
    parser.add_argument(
        "--kube-version",
        action="append",
        metavar="V",
        help="Kubernetes version to validate against, e.g. 1.31 (repeatable; default: the matrix)",
    )
    parser.add_argument("--schema-dir", type=Path, help="offline schema directory")
    add_format_option(parser)
    parser.add_argument(
        "--changed",
        nargs="+",
        metavar="FILE",
        help="validate only the spec directories (DIR/<ns>/<name>) holding these files; "
        "for pre-commit with pass_filenames",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    root = Path(args.dir)
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory")
    only: list[str] | None = None
    if args.changed:
        only = [rel for f in args.changed if (rel := _relative(Path(f), root)) is not None]
        if not only:
            print(f"no changed file under {root}; nothing to validate")
            return EXIT_OK
    report = run_gate(
        root,
        kube_versions=args.kube_version,
        schema_dir=args.schema_dir,
        display_root=args.dir.rstrip("/") or ".",
        only=only,
    )
    if args.format == "json":
        print(report.to_json())
    else:
        print(report.summary_text(), file=sys.stdout if report.ok else sys.stderr)
    return EXIT_OK if report.ok else EXIT_FAILED


def _relative(path: Path, root: Path) -> str | None:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return None
