"""Run benches on a baseline revision and on this checkout, alternating, in one run.

    python bench/before_after.py --baseline main~3
    python bench/before_after.py --baseline v0.9.0 --rounds 5 --bench merge_bench.py --runs 2

A change that should not change speed (a restructuring, say) is judged by this: each round
runs every bench once in the baseline's checkout and once in this one, in turns (the order
flips each round, so a machine that warms up or slows down weighs on both alike). Each
bench writes its results as usual (``bench/results/`` of the checkout it ran from); this
reads them back and prints, per timing (a number under a key that ends in ``_s`` or
``seconds``), the median over the rounds before and after and their ratio. Results also go to
``bench/results/before-after-<time>.json``.

The baseline is checked out as a git worktree in a temporary directory and removed at the
end; both run with this checkout's validators (``.tools/bin``) and Python.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import record  # noqa: E402

# What a restructuring touches, with arguments small enough for a few rounds: the compile
# and the gate, the weights library's diff and apply, a merge, and publish + sync.
DEFAULT_BENCHES = [
    ["compile_bench.py", "--runs", "1", "--count", "50"],
    ["weights_bench.py", "--runs", "1", "--rl-gib", "0.25", "--rss-gib", "0", "--settle", "0"],
    ["merge_bench.py", "--runs", "1"],
    ["sync_bench.py", "--runs", "1", "--gib", "0.25", "--rss-gib", "0"],
]


@contextlib.contextmanager
def _checkout(revision: str) -> Iterator[Path]:
    """The baseline revision as a worktree of this repository, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="standbyc-baseline-") as tmp:
        where = Path(tmp) / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "--quiet",
                        str(where), revision], check=True)  # fmt: skip
        try:
            yield where
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(where)],
                           check=False)  # fmt: skip


def _newest_results(results: Path, since: float) -> dict[str, Any]:
    """Every results file a bench wrote after ``since``, by its name."""
    found: dict[str, Any] = {}
    if results.is_dir():
        for path in sorted(results.glob("*.json")):
            if path.stat().st_mtime >= since and not path.name.startswith("before-after"):
                name = re.sub(r"(-\d{8}T\d{6})?\.json$", "", path.name)
                found[name] = json.loads(path.read_text())
    return found


def _is_time(key: str) -> bool:
    """A duration; ``..._gb_s`` is a rate (GB/s), not one."""
    return (key.endswith(("_s", "seconds")) and not key.endswith("gb_s")) or key == "wall"


def _timings(data: Any, prefix: str = "", timed: bool = False) -> Iterator[tuple[str, float]]:
    """Every time in the results, by its path: a number (or the median of a list of
    numbers) under a key that ends in ``_s`` or ``seconds``."""
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _timings(value, f"{prefix}/{key}" if prefix else str(key),
                                timed or _is_time(str(key)))  # fmt: skip
    elif isinstance(data, list):
        if timed and data and all(isinstance(v, int | float) for v in data):
            yield prefix, float(statistics.median(data))
            return
        for i, value in enumerate(data):
            label = value.get("name", value.get("scenario", i)) if isinstance(value, dict) else i
            yield from _timings(value, f"{prefix}[{label}]", timed)
    elif timed and isinstance(data, int | float) and not isinstance(data, bool):
        yield prefix, float(data)


def _run(tree: Path, bench: list[str], env: dict[str, str]) -> dict[str, float]:
    start = time.time() - 1
    argv = [sys.executable, str(tree / "bench" / bench[0]), *bench[1:]]
    proc = subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{tree.name}: {' '.join(bench)} failed:\n{proc.stdout}{proc.stderr}")
    return {
        f"{name}: {path}": value
        for name, data in _newest_results(tree / "bench" / "results", start).items()
        for path, value in _timings(data)
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", required=True, help="the revision to compare with")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bench", nargs=argparse.REMAINDER,
                        help="one bench and its arguments (default: a set of four)")  # fmt: skip
    args = parser.parse_args()
    benches = [args.bench] if args.bench else DEFAULT_BENCHES
    env = {**os.environ, "STANDBYC_TOOLS_DIR": str(ROOT / ".tools" / "bin")}
    samples: dict[str, dict[str, list[float]]] = {"before": {}, "after": {}}
    with _checkout(args.baseline) as baseline:
        trees = {"before": baseline, "after": ROOT}
        for round_ in range(args.rounds):
            for bench in benches:
                order = ["before", "after"] if round_ % 2 == 0 else ["after", "before"]
                for side in order:
                    print(f"round {round_ + 1}/{args.rounds}: {side}: {' '.join(bench)}",
                          flush=True)  # fmt: skip
                    for key, value in _run(trees[side], bench, env).items():
                        samples[side].setdefault(key, []).append(value)
    rows: list[tuple[str, float, float]] = []
    for key in sorted(samples["after"]):
        if before := samples["before"].get(key):
            rows.append((key, statistics.median(before), statistics.median(samples["after"][key])))
    width = max((len(key) for key, _, _ in rows), default=10)
    title = f"timing (median of {args.rounds} rounds)"
    print(f"{title:{width}}  before    after    ratio")
    for key, b, a in rows:
        ratio = f"{a / b:.2f}" if b else "-"
        print(f"{key:{width}}  {b:7.3f}  {a:7.3f}  {ratio:>6}")
    ratios = [a / b for _, b, a in rows if b >= 0.05]
    if ratios:
        print(f"median ratio (timings of 0.05 s or more): {statistics.median(ratios):.3f}")
    table = [{"timing": k, "before_s": b, "after_s": a} for k, b, a in rows]
    record.save("before-after", {"baseline": args.baseline, "rounds": args.rounds, "rows": table})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
