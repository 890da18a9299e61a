"""``standbyc plan``: what a failover costs the network, phase by phase, per spec.

The same plan `compile` writes as out/<ns>/<name>/PLAN.md (with its chart, plan.svg),
printed without writing anything."""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compiler.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from compiler.output import add_format_option

if TYPE_CHECKING:
    from compiler.api import Result


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("plan", help="print the failover plan of each spec (PLAN.md)")
    parser.add_argument(
        "paths",
        nargs="*",
        type=Path,
        metavar="PATH",
        help="spec files or directories (default: specs/)",
    )
    parser.add_argument(
        "--templates",
        type=Path,
        default=None,
        metavar="DIR",
        help="templates that override the packaged ones",
    )
    parser.add_argument(
        "--strict", action="store_true", help="exit 1 when a failover objective is missed"
    )
    add_format_option(parser)
    parser.set_defaults(func=run)


@dataclass(frozen=True)
class PlanOutcome:
    result: Result

    @property
    def exit_code(self) -> int:
        if self.result.diagnostics:
            return EXIT_BAD_INPUT
        return EXIT_FAILED if self.result.refused else EXIT_OK

    def to_json(self) -> dict[str, Any]:
        r = self.result
        return {
            "ok": self.exit_code == EXIT_OK,
            "specs": [
                {
                    "source": one.plan.source,
                    "directory": one.directory,
                    "failover": one.plan.failover.to_json(),
                    "derived": one.plan.summary(),
                }
                for one in r.specs
            ],
            "objectivesMissed": r.missed,
            "diagnostics": [d.to_json() for d in r.diagnostics],
        }

    def text(self) -> str:
        from compiler.render.plan_doc import CHART

        r = self.result
        docs = []
        for one in r.specs:
            text = r.files[f"{one.directory}/PLAN.md"].split("\n", 1)[1]  # no generated comment
            # plan writes nothing, so it points at the chart where compile writes it.
            chart = f"out/{one.directory}/{CHART}"
            lines = [
                f"(chart: `standbyc compile` writes it beside PLAN.md, as {chart})"
                if line.startswith("![") and line.endswith(f"]({CHART})")
                else line
                for line in text.split("\n")
            ]
            docs.append("\n".join(lines))
        return "\n".join(docs)

    def problem(self) -> str:
        r = self.result
        if r.diagnostics:
            return "\n".join(str(d) for d in r.diagnostics)
        return "\n".join(f"{severity}: {m}" for severity, m in r.objectives())


def run(args: argparse.Namespace) -> int:
    import tempfile

    from compiler.api import compile_tree
    from compiler.output import emit

    # Nothing is written: the output directory only anchors the file headers.
    with tempfile.TemporaryDirectory(prefix="standbyc-plan-") as tmp:
        result = compile_tree(
            args.paths,
            Path(tmp) / "out",
            validate=False,
            templates=args.templates,
            write=False,
            strict=args.strict,
        )
    return emit(PlanOutcome(result), args.format)
