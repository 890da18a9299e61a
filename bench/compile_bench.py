"""Time `standbyc compile` + validation: standbyc's own work versus the validators.

    python bench/compile_bench.py            # example specs, 200 generated specs, 1 changed
    python bench/compile_bench.py --runs 5

Scenarios, each ``--runs`` times (medians, in seconds):
- "cold": a fresh out/ and an empty cache every run (a fresh clone in CI);
- "no cache": the cache turned off (STANDBYC_CACHE=off), so every run renders and validates
  everything, as standbyc did before it had a cache;
- "unchanged": the same specs again into the same out/ with the cache warm, in-process and
  as a real `standbyc compile` process (what a user waits for, start-up included);
- one spec edited among 200, timed as real processes: `standbyc compile <spec>`, then the
  two pre-commit hooks (`check --changed`, `validate out --changed`) with the files
  pre-commit would pass.
"compile" is load + validate + plan + render + write of the specs (all standbyc); "gate own"
is standbyc's own time inside the validation gate; the validators' columns are the summed
wall times of their processes (they run concurrently). Results also go to
bench/results/compile.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from compiler import pipeline  # noqa: E402
from compiler.api import compile_tree  # noqa: E402

SEED = (ROOT / "specs" / "inference-engine.yaml").read_text()


def generate(dest: Path, count: int) -> list[Path]:
    """``count`` specs: the seed scenario under distinct names, namespaces and numbers."""
    dest.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(count):
        text = (
            SEED.replace("name: inference-engine", f"name: engine-{i:03d}")
            .replace("namespace: inference-system", f"namespace: team-{i % 20:02d}")
            .replace("generation: 42", f"generation: {i + 1}")
            .replace("replicas: 3", f"replicas: {2 + i % 2}")
        )
        path = dest / f"engine-{i:03d}.yaml"
        path.write_text(text)
        paths.append(path)
    return paths


def one_run(specs: list[Path], out: Path) -> dict[str, float]:
    result = compile_tree(specs, out)
    if not result.ok:
        raise SystemExit(result.report.summary_text() if result.report else result.diagnostics)
    report = result.report
    assert report is not None
    return {
        "files": float(report.resource_files),
        "compile_s": result.compile_seconds,
        "write_s": result.write_seconds - report.wall_seconds,
        "gate_own_s": report.own_seconds,
        "kubeconform_s": report.tool_seconds.get("kubeconform", 0.0),
        "promtool_s": report.tool_seconds.get("promtool", 0.0),
        "pint_s": report.tool_seconds.get("pint", 0.0),
        "kyverno_s": report.tool_seconds.get("kyverno", 0.0),
        "reused": float(report.reused),
        "total_s": result.compile_seconds + result.write_seconds,
    }


def median_of(samples: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(s[k] for s in samples), 3) for k in samples[0]}


def cold(specs: list[Path], base: Path, runs: int) -> dict[str, float]:
    """A fresh out/ and an empty cache each run."""
    samples = []
    for i in range(runs):
        os.environ["STANDBYC_CACHE_DIR"] = str(base / f"cache-cold-{i}")
        samples.append(one_run(specs, base / f"out-cold-{i}"))
        shutil.rmtree(base / f"out-cold-{i}")
        shutil.rmtree(base / f"cache-cold-{i}")  # the next cold scenario starts empty too
    return median_of(samples)


def no_cache(specs: list[Path], out: Path, runs: int) -> dict[str, float]:
    """Everything rendered and validated every run (after one warm-up run)."""
    os.environ["STANDBYC_CACHE"] = "off"
    try:
        return median_of([one_run(specs, out) for _ in range(runs + 1)][1:])
    finally:
        del os.environ["STANDBYC_CACHE"]


def unchanged(specs: list[Path], out: Path, base: Path, runs: int) -> dict[str, float]:
    """The same specs into the same out/ with a warm cache (the first run fills it)."""
    os.environ["STANDBYC_CACHE_DIR"] = str(base / "cache-warm")
    return median_of([one_run(specs, out) for _ in range(runs + 1)][1:])


def cli_seconds(cwd: Path, *args: str) -> float:
    """Wall time of one real ``standbyc`` process (what a user waits for), start-up included."""
    start = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, "-m", "compiler", *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    if proc.returncode != 0:
        raise SystemExit(f"standbyc {' '.join(args)} failed:\n{proc.stdout}{proc.stderr}")
    return time.perf_counter() - start


def one_changed(base: Path, spec: Path, runs: int) -> dict[str, dict[str, float]]:
    """Unchanged, then one spec edited among many: compile, then the two pre-commit hooks,
    as processes (warm cache)."""
    (base / "out-many").rename(base / "out")
    rel = spec.relative_to(base).as_posix()
    spec_dir = base / "out" / "team-07" / "engine-007"
    samples: dict[str, list[float]] = {
        "unchanged: compile process": [],
        "1 changed: compile": [],
        "1 changed: check hook": [],
        "1 changed: validate hook": [],
    }
    for i in range(runs + 1):
        nothing = cli_seconds(base, "compile", "specs")
        egress = f"egress: {20 + i}Gbit/s"
        spec.write_text(re.sub(r"egress: [0-9]+Gbit/s", egress, spec.read_text(), count=1))
        compiled = cli_seconds(base, "compile", rel)
        changed = [rel, *(p.relative_to(base).as_posix() for p in spec_dir.rglob("*.yaml"))]
        check = cli_seconds(base, "check", "--changed", *changed)
        outs = [c for c in changed if c.startswith("out/")]
        validate = cli_seconds(base, "validate", "out", "--changed", *outs)
        if i:  # the first round warms caches
            for name, value in zip(samples, (nothing, compiled, check, validate), strict=True):
                samples[name].append(value)
    return {
        name: {"total_s": round(statistics.median(values), 3)} for name, values in samples.items()
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--count", type=int, default=200)
    args = parser.parse_args()
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        examples = pipeline.discover([ROOT / "specs"])
        many = generate(base / "specs", args.count)
        results["example specs: cold"] = cold(examples, base, args.runs)
        results[f"{args.count} specs: cold"] = cold(many, base, args.runs)
        results[f"{args.count} specs: no cache"] = no_cache(many, base / "out-many", args.runs)
        results[f"{args.count} specs: unchanged"] = unchanged(
            many, base / "out-many", base, args.runs
        )
        results.update(one_changed(base, many[7], args.runs))
        shutil.rmtree(base / "specs")
    columns = [
        "files",
        "compile_s",
        "write_s",
        "gate_own_s",
        "kubeconform_s",
        "promtool_s",
        "pint_s",
        "kyverno_s",
        "reused",
        "total_s",
    ]
    print(f"{'scenario':40}" + "".join(f"{c:>14}" for c in columns))
    for name, row in results.items():
        cells = (f"{row[c]:>14g}" if c in row else " " * 14 for c in columns)
        print(f"{name:40}" + "".join(cells))
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "compile.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
