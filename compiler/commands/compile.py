"""``standbyc compile``: specs in, validated ``out/`` written atomically."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from compiler.commands._common import add_apiserver_option, add_compile_options
from compiler.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, UsageError
from compiler.plan.model import derived_lines

if TYPE_CHECKING:
    from compiler.api import Result
    from compiler.pipeline import CompiledSpec


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("compile", help="compile specs into out/ (atomically)")
    add_compile_options(parser)
    parser.add_argument(
        "--no-validate",
        action="store_true",
        help="skip the validators (kubeconform, promtool, pint and Kyverno); out/ is still "
        "written atomically",
    )
    parser.add_argument(
        "--kube-version",
        action="append",
        metavar="V",
        help="Kubernetes version to emit for and validate against (repeatable; default: the "
        "specs' validation.kubernetesVersions, else the matrix). Objects for 1.28 differ "
        "(podFailurePolicy rules carry onPodConditions: []); to keep out/ for 1.28, set "
        "validation.kubernetesVersions in the spec, which check reads too",
    )
    add_apiserver_option(parser)
    parser.add_argument(
        "--strict",
        action="store_true",
        help="a missed failover objective (failover.rto) is an error: nothing is written",
    )
    parser.add_argument(
        "--stdout",
        action="store_true",
        help="write nothing to --out; print the objects out/ would apply as one YAML stream in "
        "apply order (the summary goes to stderr): what Argo CD's plugin runs",
    )
    parser.add_argument(
        "--part",
        choices=("all", "spec", "cluster"),
        default="all",
        help="with --stdout: all objects (default); spec: without the cluster-wide ones all "
        "specs share (the CRDs); cluster: only those (one Argo CD Application per cluster "
        "owns them)",
    )
    parser.set_defaults(func=run)


def spec_summary(one: CompiledSpec) -> dict[str, Any]:
    kinds = Counter(e.kind for e in one.objects if e.is_resource)
    return {
        "source": one.plan.source,
        "directory": one.directory,
        "files": len(one.files),
        "objects": dict(sorted(kinds.items())),
        "derived": one.plan.summary(),
        "failover": one.plan.failover.to_json(),
    }


def _spec_lines(s: dict[str, Any], plan_doc: str | None) -> list[str]:
    d = s["derived"]
    objects = ", ".join(f"{n} {k}" for k, n in s["objects"].items())
    lines = [f"  {s['directory']}  <- {s['source']}", f"    objects: {objects}"]
    lines += [f"    {line}" for line in derived_lines(d)]
    where = f" (see {plan_doc})" if plan_doc else ""
    lines.append(f"    failover: {s['failover']['verdict']}{where}")
    lines += [f"    requires: {r}" for r in d["requires"]]
    return lines


@dataclass(frozen=True)
class CompileOutcome:
    result: Result
    stdout: bool = False  # --stdout: no out/ (compile_objects)

    @property
    def exit_code(self) -> int:
        if self.result.diagnostics:
            return EXIT_BAD_INPUT
        return EXIT_OK if self.result.ok else EXIT_FAILED

    def _counts(self) -> dict[str, int]:
        c = self.result.changes
        return {"added": len(c.added), "changed": len(c.changed), "removed": len(c.removed)}

    def _shared_allowlist(self) -> str | None:
        """The allowlist flag one kube-state-metrics needs for every spec compiled, when the
        specs' own flags differ (each spec's line names only its own keys)."""
        flags = {one.plan.engine.allowlist_flag for one in self.result.specs}
        if len(flags) < 2:
            return None
        # imported here: the CLI starts without pydantic (the weight-sync image has none)
        from compiler.plan import allowlist_flag

        keys = [k for one in self.result.specs for k in one.plan.engine.label_keys]
        return allowlist_flag(sorted(set(keys)))

    def to_json(self) -> dict[str, Any]:
        r = self.result
        return {
            "ok": r.ok,
            "out": str(r.out),
            "changed": r.written,
            "files": self._counts(),
            "specs": [spec_summary(c) for c in r.specs],
            "diagnostics": [d.to_json() for d in r.diagnostics],
            "validation": json.loads(r.report.to_json()) if r.report else None,
            "objectivesMissed": r.missed,
            "sharedAllowlist": self._shared_allowlist(),
            "warnings": r.warnings,
        }

    def text(self) -> str:
        from compiler.gate.report import warning_count  # the gate loads only when it is needed

        r = self.result
        if not r.ok:
            return ""
        counts = self._counts()
        lines = [
            f"wrote {r.out.name}/: {counts['added']} added, {counts['changed']} changed, "
            f"{counts['removed']} removed"
            if r.written
            else f"{r.out.name}/ is up to date"
        ]
        for one in r.specs:
            doc = None if self.stdout else f"{r.out.as_posix()}/{one.directory}/PLAN.md"
            lines += _spec_lines(spec_summary(one), doc)
        if shared := self._shared_allowlist():
            lines.append(f"  one kube-state-metrics for all {len(r.specs)} specs: {shared}")
        also = {
            "missed failover objective(s)": len(r.missed),
            "from the specs (on stderr)": len(r.warnings),
        }
        if r.report:
            lines.append(r.report.summary_text(also))
        else:
            lines.append(f"validation skipped (--no-validate); {warning_count(0, also)}")
        return "\n".join(lines)

    def problem(self) -> str:
        r = self.result
        warnings = [f"warning: {w}" for w in r.warnings]
        if r.diagnostics:
            return "\n".join([*(str(d) for d in r.diagnostics), *warnings])
        if r.report is not None and not r.report.ok:
            failed = f"validation failed; {r.out}/ was left unchanged\n{r.report.summary_text()}"
            return "\n".join([failed, *warnings])
        if r.missed:
            tail = f"; {r.out}/ was left unchanged" if r.refused else ""
            return "\n".join([*warnings, *(f"{sev}: {m}" for sev, m in r.objectives())]) + tail
        return "\n".join(warnings)


@dataclass(frozen=True)
class StreamOutcome:
    """``--stdout``: the objects on stdout, everything for people on stderr."""

    compiled: CompileOutcome
    part: str = "all"

    @property
    def exit_code(self) -> int:
        return self.compiled.exit_code

    def to_json(self) -> dict[str, Any]:
        return self.compiled.to_json()

    def text(self) -> str:
        from compiler.api import stream

        result = self.compiled.result
        return stream(result, self.part) if result.ok else ""

    def problem(self) -> str:
        # The summary without its first line, which speaks of out/.
        summary = self.compiled.text().split("\n", 1)[-1] if self.compiled.text() else ""
        return "\n".join(part for part in (summary, self.compiled.problem()) if part)


def run(args: argparse.Namespace) -> int:
    from compiler.api import compile_objects, compile_tree
    from compiler.output import emit

    options: dict[str, Any] = {
        "validate": not args.no_validate,
        "templates": args.templates,
        "kube_versions": args.kube_version,
        "strict": args.strict,
        "apiserver": args.apiserver,
    }
    if not args.stdout:
        if args.part != "all":
            raise UsageError("--part chooses what --stdout prints; it needs --stdout")
        return emit(CompileOutcome(compile_tree(args.paths, args.out, **options)), args.format)
    if args.format != "text":
        raise UsageError("--stdout prints YAML; it takes no --format")
    compiled = CompileOutcome(compile_objects(args.paths, **options, part=args.part), stdout=True)
    return emit(StreamOutcome(compiled, args.part), "text")
