"""What one merge costs a publisher, on a model of realistic size: a composition of two
one-step deltas, in worker processes (one per core) and in one process, beside the diff
that made them.

    python bench/merge_bench.py                  # 8 layers, hidden 1024: a 255 MiB bf16 model
    python bench/merge_bench.py --layers 40      # about 1.2 GiB

Generations 0..3 are RL-like steps on bf16 weights (``compiler.weights.testing.rl_pair``);
the bench diffs 0->1, 1->2, 2->3, then merges 0->1 with 1->2 (two one-step deltas) and
0->2 with 2->3 (a merged delta with the next step), as a publish's walk back does. Each
timing is the median of ``--runs``; the two ways alternate run by run. A greedy publish
makes one composition per generation in its window (63 with the default 64), so the last
line multiplies. Results go to bench/results/merge-<time>.json.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import record  # noqa: E402
from compiler.weights import compose as merge_module  # noqa: E402
from compiler.weights.diff import diff  # noqa: E402
from compiler.weights.testing import rl_pair, transformer_specs  # noqa: E402

WINDOW = 64


def timed(fn: Any, *args: Any, **kw: Any) -> float:
    t0 = time.perf_counter()
    fn(*args, **kw)
    return time.perf_counter() - t0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layers", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--runs", type=int, default=5)
    args = ap.parse_args()
    specs = transformer_specs(layers=args.layers, hidden=args.hidden, vocab=32000)
    with tempfile.TemporaryDirectory(prefix="standbyc-merge-bench-") as tmp:
        d = Path(tmp)
        for k in (1, 2, 3):
            rl_pair(d / "g0.safetensors", d / f"g{k}.safetensors", specs, steps=k, lr=2e-6)
        model_bytes = (d / "g0.safetensors").stat().st_size
        diffs = []
        for a, b in ((0, 1), (1, 2), (2, 3)):
            old, new = d / f"g{a}.safetensors", d / f"g{b}.safetensors"
            diffs.append(timed(diff, new, d / f"{a}{b}.delta", old_path=old))
        pairs = {"0-1 + 1-2": ("01", "12", "02"), "0-2 + 2-3": ("02", "23", "03")}
        rows: dict[str, dict[str, Any]] = {}
        merge_module.PARALLEL_BYTES = 0  # workers whatever the model's size
        for name, (first, second, merged) in pairs.items():
            times: dict[str, list[float]] = {"workers": [], "one process": []}
            inputs = (d / f"{first}.delta", d / f"{second}.delta", d / f"{merged}.delta")
            for _ in range(args.runs):
                for way, taken in times.items():
                    merge_module.PARALLEL_FROM = 8 if way == "workers" else sys.maxsize
                    taken.append(timed(merge_module.merge, *inputs))
            medians = {way: statistics.median(ts) for way, ts in times.items()}
            rows[name] = {
                "first_bytes": (d / f"{first}.delta").stat().st_size,
                "second_bytes": (d / f"{second}.delta").stat().st_size,
                "merged_bytes": (d / f"{merged}.delta").stat().st_size,
                "seconds": medians,
                "runs": times,
            }
    diff_s = statistics.median(diffs)
    print(f"model {model_bytes / 2**20:.0f} MiB, {len(specs)} tensors, {os.cpu_count()} CPUs; "
          f"a one-step diff {diff_s:.2f} s (median of 3)")  # fmt: skip
    for name, row in rows.items():
        s = row["seconds"]
        print(f"  merge {name}: {row['first_bytes']} + {row['second_bytes']} -> "
              f"{row['merged_bytes']} B; workers {s['workers']:.3f} s, one process "
              f"{s['one process']:.3f} s ({s['one process'] / s['workers']:.2f}x); "
              f"{s['workers'] / model_bytes * 2**30:.2f} s per GiB of model")  # fmt: skip
    last = rows["0-2 + 2-3"]["seconds"]
    print(f"  a greedy publish's walk back over a full window ({WINDOW - 1} compositions): "
          f"about {(WINDOW - 1) * last['workers']:.0f} s with workers, "
          f"{(WINDOW - 1) * last['one process']:.0f} s in one process")  # fmt: skip
    record.save("merge", {
        "model_bytes": model_bytes, "tensors": len(specs), "cpus": os.cpu_count(),
        "runs": args.runs, "diff_seconds": diffs, "merges": rows,
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
