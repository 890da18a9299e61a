"""Time the validation gate: standbyc's own time versus time in kubeconform, promtool, pint.

    python bench/validate_bench.py                  # fixture tree as 1 spec and as 200 specs
    python bench/validate_bench.py --tree out       # a real out/ tree (after standbyc compile)

Columns, in seconds: wall; own = wall minus time spent waiting for tools; kubeconf/promtool/
pint = summed wall time of each tool's processes (they run concurrently, so the sum can
exceed wall); own cpu = CPU of the standbyc process; tool cpu = CPU of all tool processes.
On a 2-core machine the CPU columns are the fairer comparison. Results also go to
bench/results/validate.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compiler.validate import Report, validate_tree  # noqa: E402

FIXTURE = ROOT / "tests" / "validate" / "fixtures" / "good"


def replicate(dest: Path, specs: int) -> Path:
    """``specs`` copies of the fixture's namespace tree, like out/ for that many specs."""
    for i in range(specs):
        shutil.copytree(FIXTURE / "inference-system", dest / f"ns{i:03d}")
    shutil.copytree(FIXTURE / "crds", dest / "crds")
    return dest


def measure(
    tree: Path, runs: int, versions: list[str] | None, only: list[str] | None = None
) -> dict[str, float]:
    reports: list[Report] = []
    for _ in range(runs + 1):  # the first run warms the page cache and is dropped
        report = validate_tree(tree, kube_versions=versions, display_root="out", only=only)
        if not report.ok:
            raise SystemExit(report.summary_text())
        reports.append(report)
    reports = reports[1:]

    def med(values: list[float]) -> float:
        return round(statistics.median(values), 3)

    return {
        "files": reports[0].resource_files,
        "rule_tests": len(reports[0].rule_tests),
        "wall_s": med([r.wall_seconds for r in reports]),
        "own_s": med([r.own_seconds for r in reports]),
        "tools_wall_s": med([r.tools_wall_seconds for r in reports]),
        "kubeconform_s": med([r.tool_seconds["kubeconform"] for r in reports]),
        "promtool_s": med([r.tool_seconds["promtool"] for r in reports]),
        "pint_s": med([r.tool_seconds["pint"] for r in reports]),
        "own_cpu_s": med([r.own_cpu_seconds for r in reports]),
        "tools_cpu_s": med([r.tools_cpu_seconds for r in reports]),
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tree", type=Path, help="validate this out/ tree instead of fixtures")
    parser.add_argument("--specs", type=int, default=200, help="generated specs (default 200)")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--kube-version", action="append", dest="versions")
    args = parser.parse_args()

    results: dict[str, dict[str, float]] = {}
    if args.tree:
        results[str(args.tree)] = measure(args.tree, args.runs, args.versions)
    else:
        with tempfile.TemporaryDirectory() as tmp:
            one = replicate(Path(tmp) / "one", 1)
            many = replicate(Path(tmp) / "many", args.specs)
            results["1 spec (fixture)"] = measure(one, args.runs, args.versions)
            results[f"{args.specs} specs (fixture x{args.specs})"] = measure(
                many, args.runs, args.versions
            )
            changed = ["ns007/seed/prometheusrule-seed-egress.yaml"]
            results[f"1 changed of {args.specs} (--changed)"] = measure(
                many, args.runs, args.versions, only=changed
            )

    header = (
        f"{'scenario':<32}{'files':>6}{'wall':>7}{'own':>7}{'kubeconf':>9}{'promtool':>9}"
        f"{'pint':>6}{'own cpu':>9}{'tool cpu':>9}"
    )
    print(header)
    for name, r in results.items():
        print(
            f"{name:<32}{int(r['files']):>6}{r['wall_s']:>7.2f}{r['own_s']:>7.2f}"
            f"{r['kubeconform_s']:>9.2f}{r['promtool_s']:>9.2f}{r['pint_s']:>6.2f}"
            f"{r['own_cpu_s']:>9.2f}{r['tools_cpu_s']:>9.2f}"
        )
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "validate.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
