"""``standbyc plan``: what a failover costs the network, phase by phase, per spec.

The same plan `compile` writes as out/<ns>/<name>/PLAN.md (with its chart, plan.svg),
printed without writing anything."""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compiler.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK
from compiler.failover import numbers
from compiler.output import add_format_option

if TYPE_CHECKING:
    from compiler.api import Result
    from compiler.measured import Measured


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
    parser.add_argument(
        "--from-prometheus",
        metavar="URL",
        default=None,
        help="replace the plan's defaults with the p95 of what this Prometheus measured: the "
        "serving pods' egress, the engines' reload and the syncs' duration (printed only: "
        "out/ follows the spec alone)",
    )
    parser.add_argument(
        "--window",
        default="7d",
        metavar="DURATION",
        help="how far back --from-prometheus looks (default 7d)",
    )
    add_format_option(parser)
    parser.set_defaults(func=run)


@dataclass(frozen=True)
class PlanOutcome:
    result: Result
    measured: dict[str, Measured] = field(default_factory=dict)  # directory -> what was

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
                    "inputs": [
                        {"name": name, **n.to_json()}
                        for name, n in numbers(one.plan.failover_inputs)
                    ],
                    "derived": one.plan.summary(),
                    **(
                        {"measured": {"missing": list(m.missing), "spec": m.spec_lines()}}
                        if (m := self.measured.get(one.directory)) is not None
                        else {}
                    ),
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
            measured = self.measured.get(one.directory)
            if measured is not None:
                lines += _measured_lines(measured)
            docs.append("\n".join(lines))
        return "\n".join(docs)

    def problem(self) -> str:
        r = self.result
        if r.diagnostics:
            return "\n".join(str(d) for d in r.diagnostics)
        return "\n".join(f"{severity}: {m}" for severity, m in r.objectives())


def _measured_lines(m: Measured) -> list[str]:
    out = ["", "## Measured (--from-prometheus)", ""]
    out += [f"- no data: {what}; the plan keeps its own number" for what in m.missing]
    if m.spec_lines():
        out.append("- to keep what was measured, write in the spec: " + "; ".join(m.spec_lines()))
    return out


def _measure(args: argparse.Namespace, result: Result) -> PlanOutcome:
    """The plan of each spec again, with what Prometheus measured."""
    from dataclasses import replace

    from compiler import measured, units
    from compiler.errors import UsageError
    from compiler.failover import analyse
    from compiler.render import plan_doc
    from compiler.render.base import Renderer

    try:
        units.parse_duration(args.window)
    except units.UnitError as exc:
        raise UsageError(f"--window {args.window!r}: {exc}") from None
    renderer = Renderer(args.templates)
    specs, files, found = [], dict(result.files), {}
    for one in result.specs:
        got = measured.measure(args.from_prometheus, one.plan, args.window)
        inputs = measured.applied(one.plan.failover_inputs, got)
        plan = replace(one.plan, failover=analyse(inputs), failover_inputs=inputs)
        doc = next(e for e in plan_doc.render(plan, renderer) if e.relpath == "PLAN.md")
        files[f"{one.directory}/PLAN.md"] = "<!-- measured -->\n" + (doc.text or "")
        specs.append(replace(one, plan=plan))
        found[one.directory] = got
    return PlanOutcome(replace(result, specs=tuple(specs), files=files), found)


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
    if args.from_prometheus and not result.diagnostics:
        return emit(_measure(args, result), args.format)
    return emit(PlanOutcome(result), args.format)
