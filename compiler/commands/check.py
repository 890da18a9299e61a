"""``standbyc check``: exit 1, with a diff, when ``out/`` is not what compile would write."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compiler.commands._common import add_compile_options
from compiler.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from compiler.fsutil import resolved

if TYPE_CHECKING:
    from compiler.api import Result


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("check", help="exit 1 with a diff when out/ is stale")
    add_compile_options(parser)
    parser.add_argument(
        "--changed",
        nargs="+",
        metavar="FILE",
        help="check only the specs these changed files belong to (pre-commit passes them); "
        "a changed template or shared file means a full check",
    )
    parser.set_defaults(func=run)


def specs_for(changed: list[str], specs: list[Path], out: Path) -> list[Path] | None:
    """The specs whose output the changed files can affect, or None for "all of them".

    A spec file stands for itself; a file in out/ for the spec named in its header (or in
    its directory's kustomization.yaml when it was deleted). Anything else, such as a
    template, a shared file or a hand-written file, can affect every spec.
    """
    from compiler.pipeline import header_source

    root = resolved(out).parent
    by_source = {header_source(p, root): p for p in specs}
    chosen: dict[str, Path] = {}
    for name in changed:
        own = header_source(Path(name), root)
        source = own if own in by_source else _source_in_out(Path(name), out)
        if source is None or source not in by_source:
            return None
        chosen[source] = by_source[source]
    return list(chosen.values())


def _source_in_out(path: Path, out: Path) -> str | None:
    from compiler import decorate, yamlio

    try:
        rel = resolved(path).relative_to(resolved(out))
    except ValueError:
        return None
    candidates = [path]
    if len(rel.parts) >= 3:
        candidates.append(out / rel.parts[0] / rel.parts[1] / decorate.KUSTOMIZATION)
    for candidate in candidates:
        if candidate.is_file():
            return yamlio.source_of(candidate.read_text(encoding="utf-8", errors="replace"))
    return None


@dataclass(frozen=True)
class CheckOutcome:
    result: Result

    @property
    def exit_code(self) -> int:
        if self.result.diagnostics:
            return EXIT_BAD_INPUT
        return EXIT_FAILED if self.result.changes.paths or self.result.refused else EXIT_OK

    def _diff(self) -> str:
        from compiler import outdir

        r = self.result
        return outdir.diff(r.current, r.files, r.out.as_posix())

    def to_json(self) -> dict[str, Any]:
        r = self.result
        stale = list(r.changes.paths)
        return {
            "out": str(r.out),
            "fresh": not stale and not r.diagnostics,
            "stale": stale,
            "diff": self._diff() if stale else "",
            "diagnostics": [d.to_json() for d in r.diagnostics],
        }

    def text(self) -> str:
        r = self.result
        if r.diagnostics:
            return ""
        return self._diff() if r.changes.paths else f"{r.out}/ is up to date"

    def problem(self) -> str:
        r = self.result
        if r.diagnostics:
            return "\n".join(str(d) for d in r.diagnostics)
        # A missed objective is said at every commit, and refuses it where the spec (its
        # failover.strict) asks: compile would not write such a tree either.
        lines = [f"{severity}: {m}" for severity, m in r.objectives()]
        if lines:
            lines.append(
                "PLAN.md beside each spec's objects shows the timelines and what would meet "
                "the objective (pre-commit run standbyc-check --all-files repeats this)"
            )
        if stale := r.changes.paths:
            files = "1 file differs" if len(stale) == 1 else f"{len(stale)} files differ"
            lines.append(f"{r.out}/ is stale ({files}); run: standbyc compile")
        return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from compiler import pipeline
    from compiler.api import DEFAULT_SPECS, compile_tree
    from compiler.output import emit

    specs = pipeline.discover(args.paths or [DEFAULT_SPECS])
    only = specs_for(args.changed, specs, args.out) if args.changed else None
    result = compile_tree(
        specs if only is None else only, args.out, templates=args.templates, write=False
    )
    return emit(CheckOutcome(result), args.format)
