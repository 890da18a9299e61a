"""``standbyc check``: exit 1, with a diff, when ``out/`` is not what compile would write."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from compiler.commands._common import add_compile_options, desired_tree, emit_json
from compiler.errors import EXIT_FAILED


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
    from compiler.load import display_path

    by_source = {display_path(p): p for p in specs}
    chosen: dict[str, Path] = {}
    for name in changed:
        shown = display_path(Path(name))
        source = shown if shown in by_source else _source_in_out(Path(name), out)
        if source is None or source not in by_source:
            return None
        chosen[source] = by_source[source]
    return list(chosen.values())


def _source_in_out(path: Path, out: Path) -> str | None:
    from compiler import pipeline, yamlio

    try:
        rel = path.resolve().relative_to(out.resolve())
    except ValueError:
        return None
    candidates = [path]
    if len(rel.parts) >= 3:
        candidates.append(out / rel.parts[0] / rel.parts[1] / pipeline.KUSTOMIZATION)
    for candidate in candidates:
        if candidate.is_file():
            return yamlio.source_of(candidate.read_text(encoding="utf-8", errors="replace"))
    return None


def run(args: argparse.Namespace) -> int:
    from compiler import outdir, pipeline

    specs = pipeline.discover(args.paths or [Path("specs")])
    only = specs_for(args.changed, specs, args.out) if args.changed else None
    _, current, desired = desired_tree(args, specs if only is None else only)
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
