"""What the Grafana dashboard costs `standbyc compile`: the 200 generated specs of
compile_bench.py compiled with the dashboard (the default) and with `dashboard: {enabled:
false}`, side by side in the same run.

    python bench/dashboard_bench.py                 # 200 specs, 5 runs each way
    python bench/dashboard_bench.py --validate      # also cold runs with the validation gate

Without validation every run renders everything (STANDBYC_CACHE=off): that is standbyc's own
work, where the dashboard weighs most. With ``--validate``, each run is cold (a fresh out/
and an empty cache), as compile_bench.py's "200 specs: cold". The two ways alternate run by
run; medians, in seconds, of the wall time and of the CPU time (this process and its
workers and validators: steadier than the wall time on a busy machine). Results go to
bench/results/dashboard-<time>.json.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import record  # noqa: E402
from bench.compile_bench import generate  # noqa: E402
from compiler.api import compile_tree  # noqa: E402

OFF = "  dashboard:\n    enabled: false\n"


def without_dashboard(specs: list[Path], dest: Path) -> list[Path]:
    """The same specs with the dashboard turned off (the seed's ``spec:`` block ends the
    file, so the key is appended to it)."""
    dest.mkdir(parents=True)
    out = []
    for spec in specs:
        path = dest / spec.name
        path.write_text(spec.read_text().rstrip("\n") + "\n" + OFF)
        out.append(path)
    return out


def _cpu() -> float:
    """CPU seconds of this process and of its finished children (the compile's workers and
    the validators): what the compile costs, whatever else the machine runs."""
    own, kids = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + kids.ru_utime + kids.ru_stime


def timed(specs: list[Path], out: Path, *, validate: bool) -> dict[str, float]:
    t0, c0 = time.perf_counter(), _cpu()
    result = compile_tree(specs, out, validate=validate)
    wall, cpu = time.perf_counter() - t0, _cpu() - c0
    if not result.ok:
        raise SystemExit(str(result.report.summary_text() if result.report else result.diagnostics))
    shutil.rmtree(out)
    return {"compile_s": result.compile_seconds, "wall_s": wall, "cpu_s": cpu,
            "files": len(result.files)}  # fmt: skip


def compare(on: list[Path], off: list[Path], base: Path, runs: int, *, validate: bool) -> dict:
    samples: dict[str, list[dict[str, float]]] = {"with": [], "without": []}
    for i in range(runs + 1):
        ways = [("with", on), ("without", off)]
        for name, specs in ways if i % 2 else ways[::-1]:  # neither always goes first
            if validate:
                os.environ["STANDBYC_CACHE_DIR"] = str(base / f"cache-{name}-{i}")
            sample = timed(specs, base / f"out-{name}", validate=validate)
            if i:  # the first round warms imports and the page cache
                samples[name].append(sample)
    row = {
        name: {k: round(statistics.median(s[k] for s in rows), 3) for k in rows[0]}
        for name, rows in samples.items()
    }
    for key in ("compile_s", "wall_s", "cpu_s"):
        row[f"{key} ratio"] = round(row["with"][key] / row["without"][key], 3)  # type: ignore[assignment]
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--count", type=int, default=200)
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--validate", action="store_true")
    args = ap.parse_args()
    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="standbyc-dashboard-bench-") as tmp:
        base = Path(tmp)
        on = generate(base / "specs", args.count)
        off = without_dashboard(on, base / "specs-off")
        os.environ["STANDBYC_CACHE"] = "off"
        results[f"{args.count} specs, no validation, no cache"] = compare(
            on, off, base, args.runs, validate=False
        )
        del os.environ["STANDBYC_CACHE"]
        if args.validate:
            results[f"{args.count} specs, validated, cold"] = compare(
                on, off, base, max(1, args.runs // 2), validate=True
            )
    for name, row in results.items():
        print(name)
        for way in ("with", "without"):
            print(f"  {way:8} dashboard: " + ", ".join(f"{k} {v}" for k, v in row[way].items()))
        print("  with/without: " + ", ".join(f"{k} {v}" for k, v in row.items() if "ratio" in k))
    record.save("dashboard", {"count": args.count, "runs": args.runs, "results": results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
