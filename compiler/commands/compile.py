"""``standbyc compile``: specs in, validated ``out/`` written atomically."""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Any

from compiler import units
from compiler.commands._common import add_compile_options, desired_tree, emit_json
from compiler.errors import ValidationFailed

if TYPE_CHECKING:
    from compiler.gate import Report
    from compiler.pipeline import CompiledSpec


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("compile", help="compile specs into out/ (atomically)")
    add_compile_options(parser)
    parser.add_argument(
        "--no-validate",
        action="store_true",
        help="skip kubeconform and promtool (out/ is still written atomically)",
    )
    parser.add_argument(
        "--kube-version",
        action="append",
        metavar="V",
        help="Kubernetes version to validate against (repeatable; default: the specs' "
        "validation.kubernetesVersions, else the matrix)",
    )
    parser.set_defaults(func=run)


def _spec_summary(one: CompiledSpec) -> dict[str, Any]:
    kinds = Counter(e.kind for e in one.objects if e.is_resource)
    return {
        "source": one.plan.source,
        "directory": one.directory,
        "files": len(one.files),
        "objects": dict(sorted(kinds.items())),
        "derived": one.plan.summary(),
    }


def _print_text(
    out_name: str, changed: bool, counts: dict[str, int], specs: list[dict[str, Any]]
) -> None:
    if changed:
        print(
            f"wrote {out_name}/: {counts['added']} added, {counts['changed']} changed, "
            f"{counts['removed']} removed"
        )
    else:
        print(f"{out_name}/ is up to date")
    for s in specs:
        d = s["derived"]
        objects = ", ".join(f"{n} {k}" for k, n in s["objects"].items())
        print(f"  {s['directory']}  <- {s['source']}")
        print(f"    objects: {objects}")
        fc, dl, hc = d["fullCopy"], d["delta"], d["healthChecks"]
        print(
            f"    full copy: {fc['formula']} = {fc['gigabits']} Gbit -> "
            f"{units.human_seconds(fc['seconds'])} at line rate"
        )
        print(
            f"    delta: {dl['formula']} = {units.human_bytes(dl['bytes'])} -> "
            f"{units.human_seconds(dl['seconds'])}"
        )
        print(
            f"    health checks: {hc['formula']} = {hc['probesPerSecond']:g} probes/s, "
            f"{units.human_bytes(hc['bytesPerSecond'])}/s"
        )
        for tier, t in d["tiers"].items():
            print(
                f"    tier {tier}: {t['replicas']} x egress {t['egress']}bit/s, priority "
                f"{t['priority']}, weight sync {units.human_bits(t['syncRateBitsPerSecond'])}"
            )


def _kube_versions(args: argparse.Namespace, compiled: list[CompiledSpec]) -> list[str] | None:
    if args.kube_version:
        return list(args.kube_version)
    asked = {v for c in compiled for v in c.plan.kube_versions}
    return sorted(asked) or None


def run(args: argparse.Namespace) -> int:
    from compiler import outdir, pipeline
    from compiler.gate import run_gate

    compiled, current, desired = desired_tree(args)
    reports: list[Report] = []

    def gate(staged: Path) -> None:
        # Validate the staged tree, so a rejected tree never reaches out/.
        # The directories of the specs compiled now (and the shared CRDs): the files
        # kept from other specs were validated when they were written.
        only = [f"{c.directory}/{pipeline.KUSTOMIZATION}" for c in compiled]
        only.append(f"{pipeline.CRD_DIR}/{pipeline.KUSTOMIZATION}")
        report = run_gate(
            staged,
            kube_versions=_kube_versions(args, compiled),
            display_root=args.out.as_posix(),
            only=only,
        )
        reports.append(report)
        if not report.ok:
            raise ValidationFailed(
                f"validation failed; {args.out}/ was left unchanged\n{report.summary_text()}"
            )

    changed = outdir.replace(args.out, desired, validate=None if args.no_validate else gate)
    before = current.owned
    counts = {
        "added": sum(1 for p in desired if p not in before),
        "changed": sum(1 for p in desired if p in before and before[p] != desired[p]),
        "removed": sum(1 for p in before if p not in desired),
    }
    specs = [_spec_summary(c) for c in compiled]
    validation = reports[0] if reports else None
    if args.format == "json":
        emit_json(
            {
                "out": str(args.out),
                "changed": changed,
                "files": counts,
                "specs": specs,
                "validation": json.loads(validation.to_json()) if validation else None,
            }
        )
    else:
        _print_text(args.out.name, changed, counts, specs)
        print(validation.summary_text() if validation else "validation skipped (--no-validate)")
    return 0
