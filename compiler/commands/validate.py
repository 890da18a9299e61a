"""``standbyc validate [DIR]``: the validation gate over a tree laid out like ``out/``."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compiler.commands._common import add_apiserver_option
from compiler.errors import EXIT_FAILED, EXIT_OK, UsageError
from compiler.output import add_format_option, emit

if TYPE_CHECKING:
    from compiler.gate import Report


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "validate",
        help="validate manifests with kubeconform, rules with promtool (and pint), offline",
        description=(
            "Run kubeconform over every manifest for each Kubernetes version, promtool check "
            "rules on every PrometheusRule, pint if installed, and promtool test rules on "
            "every tests/*.test.yaml; with --apiserver, also server-side dry-run every object "
            "on a throwaway local kube-apiserver. Exit 1 on any finding."
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
    add_apiserver_option(parser)
    add_format_option(parser)
    parser.add_argument(
        "--changed",
        nargs="+",
        metavar="FILE",
        help="validate only the spec directories (DIR/<ns>/<name>) holding these files; "
        "for pre-commit with pass_filenames",
    )
    parser.set_defaults(func=run)


@dataclass(frozen=True)
class ValidateOutcome:
    report: Report

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.report.ok else EXIT_FAILED

    def to_json(self) -> dict[str, Any]:
        return self.report.to_dict()

    def text(self) -> str:
        return self.report.summary_text() if self.report.ok else ""

    def problem(self) -> str:
        return "" if self.report.ok else self.report.summary_text()


@dataclass(frozen=True)
class NothingToValidate:
    root: Path
    exit_code: int = EXIT_OK

    def to_json(self) -> dict[str, Any]:
        return {"ok": True, "root": str(self.root), "skipped": "no changed file under it"}

    def text(self) -> str:
        return f"no changed file under {self.root}; nothing to validate"

    def problem(self) -> str:
        return ""


def run(args: argparse.Namespace) -> int:
    from compiler.validation import run_gate

    root = Path(args.dir)
    if not root.is_dir():
        raise UsageError(f"{root}: not a directory")
    only: list[str] | None = None
    if args.changed:
        only = [rel for f in args.changed if (rel := _relative(Path(f), root)) is not None]
        if not only:
            return emit(NothingToValidate(root), args.format)
    report = run_gate(
        root,
        kube_versions=args.kube_version,
        schema_dir=args.schema_dir,
        display_root=args.dir.rstrip("/") or ".",
        only=only,
        apiserver=args.apiserver,
    )
    return emit(ValidateOutcome(report), args.format)


def _relative(path: Path, root: Path) -> str | None:
    try:
        return path.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return None
