"""What the API server costs the gate: ``validate`` with and without ``--apiserver``.

    python bench/apiserver_bench.py            # example specs and 200 generated specs
    python bench/apiserver_bench.py --runs 5 --count 200

Each tree is compiled once without validation; then the gate runs over it ``--runs`` times
each way, alternating, with the cache off (every validator runs every time) and the default
matrix. "apiserver" is the API server step alone (a fresh control plane each run: its start,
the CRDs, the namespaces and every dry-run), which runs beside the other validators;
"gate" is the whole gate's wall time. Medians, in seconds, through bench/record.py.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import record  # noqa: E402
from bench.compile_bench import generate  # noqa: E402
from compiler import pipeline  # noqa: E402
from compiler.api import compile_tree  # noqa: E402
from compiler.validation import run_gate  # noqa: E402


def gate(out: Path, apiserver: bool) -> dict[str, float]:
    report = run_gate(out, apiserver=apiserver)
    if not report.ok:
        raise SystemExit(report.summary_text())
    return {
        "gate_s": report.wall_seconds,
        "apiserver_s": report.tool_seconds.get("kube-apiserver", 0.0),
        "kubeconform_s": report.tool_seconds.get("kubeconform", 0.0),
        "files": float(report.resource_files),
    }


def median(samples: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(s[k] for s in samples), 3) for k in samples[0]}


def both(specs: list[Path], out: Path, runs: int) -> dict[str, dict[str, float]]:
    result = compile_tree(specs, out, validate=False)
    if not result.ok:
        raise SystemExit(str(result.diagnostics))
    plain: list[dict[str, float]] = []
    served: list[dict[str, float]] = []
    for _ in range(runs):
        plain.append(gate(out, apiserver=False))
        served.append(gate(out, apiserver=True))
    with_server = median(served)
    without = median(plain)
    with_server["ratio"] = round(with_server["gate_s"] / without["gate_s"], 2)
    return {"without --apiserver": without, "with --apiserver": with_server}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", type=int, default=200)
    args = parser.parse_args()
    os.environ["STANDBYC_CACHE"] = "off"
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        examples = pipeline.discover([ROOT / "specs"])
        for name, specs, out in (
            ("example specs", examples, base / "out-examples"),
            (f"{args.count} specs", generate(base / "specs", args.count), base / "out-many"),
        ):
            for way, row in both(specs, out, args.runs).items():
                results[f"{name}: {way}"] = row
    columns = ["files", "gate_s", "apiserver_s", "kubeconform_s", "ratio"]
    print(f"{'scenario':40}" + "".join(f"{c:>14}" for c in columns))
    for name, row in results.items():
        cells = (f"{row[c]:>14g}" if c in row else " " * 14 for c in columns)
        print(f"{name:40}" + "".join(cells))
    record.save("apiserver", results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
