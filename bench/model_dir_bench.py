"""A Hugging Face model directory from one generation to the next, through nginx.

Two measurements, each in the same run as its baseline:

1. standbyc's directory sync against the file sync of a baseline revision (the state
   before model directories: it published and synced the safetensors file alone), on the
   same pair of generations: bytes fetched and wall time, for a standby one generation
   behind and for a new one. The baseline's output is not a loadable directory (no
   config.json, no tokenizer): the bytes it saves are the files it drops.
2. The failover plan's total for the example specs, at this revision and at the baseline.

A tier of engine pods from "published" to "every pod serves it" is bench/reload_bench.py.

    python bench/model_dir_bench.py [--baseline REV] [--runs 3] [--hidden 512 --layers 8]

Results go to bench/results/model-dir-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import record  # noqa: E402
from tests.servers import Nginx, free_port  # noqa: E402
from tests.sync import hfmodel  # noqa: E402

BASELINE = "a97b590"  # the last revision before model directories (issue 21 was filed at it)


def standbyc(tree: Path, *args: str) -> tuple[dict[str, Any], float]:
    """Run the standbyc of source tree ``tree``; its JSON output and wall time."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    t0 = time.perf_counter()
    argv = [sys.executable, "-m", "compiler", *args, "--format", "json"]
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tree, check=False)
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"standbyc {' '.join(args)} ({tree}) failed:\n{proc.stderr}")
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc, wall


def sync_pair(tree: Path, url: str, target: Path, runs: int) -> dict[str, Any]:
    """Median over ``runs`` of syncing generation 2 onto a standby at 1, and onto nothing."""
    behind, fresh = [], []
    for _ in range(runs):
        shutil.rmtree(target.parent, ignore_errors=True)
        standbyc(tree, "weights", "sync", "--source", url, "--generation", "1",
                 "--target", str(target))  # fmt: skip
        behind.append(standbyc(tree, "weights", "sync", "--source", url, "--generation", "2",
                               "--target", str(target)))  # fmt: skip
        shutil.rmtree(target.parent, ignore_errors=True)
        fresh.append(standbyc(tree, "weights", "sync", "--source", url, "--generation", "2",
                              "--target", str(target)))  # fmt: skip
    return {
        "behind": {"bytes": behind[0][0]["bytes_fetched"],
                   "seconds": statistics.median(w for _, w in behind)},
        "new_standby": {"bytes": fresh[0][0]["bytes_fetched"],
                        "seconds": statistics.median(w for _, w in fresh)},
        "files": sorted(p.relative_to(target).as_posix() for p in target.rglob("*")
                        if p.is_file()),
    }  # fmt: skip


def compare_sync(gens: dict[int, Path], baseline: Path, work: Path, runs: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for label, tree, source in (
        ("baseline file sync", baseline, {g: gens[g] / "model.safetensors" for g in gens}),
        ("directory sync", ROOT, gens),
    ):
        store = work / label.replace(" ", "-") / "store"
        store.mkdir(parents=True)
        nginx = Nginx(store, store.parent / "nginx", free_port())
        nginx.start()
        try:
            for g in (1, 2):
                standbyc(tree, "weights", "publish", str(source[g]), "--to", str(store),
                         "--generation", str(g))  # fmt: skip
            target = store.parent / "weights" / "hot" / "model"
            out[label] = sync_pair(tree, nginx.url, target, runs)
        finally:
            nginx.stop()
    return out


def plan_totals(baseline: Path) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for label, tree in (("baseline", baseline), ("now", ROOT)):
        doc, _ = standbyc(tree, "plan", str(tree / "specs"))
        for spec in doc["specs"]:
            out.setdefault(spec["directory"], {})[label] = spec["failover"]["seconds"]
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", default=BASELINE, help="the revision to compare with")
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--vocab", type=int, default=32000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="standbyc-model-dir-") as tmp:
        work = Path(tmp)
        baseline = work / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(baseline),
                        args.baseline], check=True, capture_output=True)  # fmt: skip
        try:
            print(f"building the model (hidden {args.hidden}, {args.layers} layers, "
                  f"vocabulary {args.vocab}) ...", flush=True)  # fmt: skip
            gens = hfmodel.build(work / "model", hidden=args.hidden, layers=args.layers,
                                 vocab=args.vocab, lr=1e-5)  # fmt: skip
            sizes = {g: sum(f.stat().st_size for f in d.rglob("*") if f.is_file())
                     for g, d in gens.items()}  # fmt: skip
            results = {
                "baseline": args.baseline,
                "directory_bytes": sizes,
                "weights_bytes": (gens[2] / "model.safetensors").stat().st_size,
                "sync": compare_sync(gens, baseline, work, args.runs),
                "plan": plan_totals(baseline),
            }
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(baseline)], check=False, capture_output=True)  # fmt: skip
    report(results)
    record.save("model-dir", results)


def report(r: dict[str, Any]) -> None:
    print(f"\nmodel directory: {r['directory_bytes'][2]} bytes, of which weights "
          f"{r['weights_bytes']}")  # fmt: skip
    print("\n| sync | one generation behind | a new standby | files delivered |")
    print("|---|---:|---:|---|")
    for label, s in r["sync"].items():
        b, n = s["behind"], s["new_standby"]
        print(f"| {label} ({r['baseline'] if 'baseline' in label else 'now'}) | "
              f"{b['bytes']} B, {b['seconds']:.2f} s | {n['bytes']} B, {n['seconds']:.2f} s | "
              f"{', '.join(s['files'])} |")  # fmt: skip
    print("\n| spec | failover before | after |")
    print("|---|---:|---:|")
    for name, t in r["plan"].items():
        print(f"| {name} | {t.get('baseline', float('nan')):.2f} s | {t['now']:.2f} s |")


if __name__ == "__main__":
    main()
