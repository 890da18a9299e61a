"""Benchmark of standbyc's weight deltas against the seed's scheme, rsync and a full copy.

Run: ``python bench/weights_bench.py`` (about 10 minutes on 2 cores). Generates
checkpoints on the fly in a temp dir, prints a table and writes
``bench/results/weights-<time>.json``. Every standbyc run is a subprocess so its
peak RSS is measured on its own (VmHWM).

Per pair it reports the delta's bytes per changed element, diff's speed as a
multiple of md5 over the same two files (timed in the same run) and apply's
GB/s. ``--baseline DIR`` also runs the standbyc of another checkout (e.g. a
``git worktree`` of an older commit) on the same files, interleaved run by run,
so both encodings are measured under the same machine load.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import record  # noqa: E402
from bench.seed_scheme import seed_bytes  # noqa: E402
from compiler.weights.safetensors_io import UINT_OF_WIDTH, Checkpoint  # noqa: E402
from compiler.weights.testing import (  # noqa: E402
    finetune_pair,
    rl_pair,
    transformer_specs,
    write_safetensors,
)

PY = sys.executable
MIB = 1 << 20


def run_rusage(argv: list[str], root: Path = ROOT) -> tuple[dict[str, Any], float, int]:
    """Run the standbyc of checkout ``root`` in a subprocess; its JSON, wall s, peak RSS."""
    t0 = time.perf_counter()
    res = subprocess.run([PY, str(root / "bench" / "rss_child.py"), *argv, "--format", "json"],
                         capture_output=True, text=True, check=False)  # fmt: skip
    wall = time.perf_counter() - t0
    if res.returncode != 0:
        raise SystemExit(f"standbyc {' '.join(argv)} failed:\n{res.stderr}")
    m = re.search(r"VmHWM (\d+)", res.stderr)
    return json.loads(res.stdout), wall, int(m.group(1)) * 1024 if m else -1


def warm(path: Path) -> None:
    """Read a file once so the measurement sees it in page cache."""
    with path.open("rb") as f:
        while f.read(64 * MIB):
            pass


def md5_seconds(paths: list[Path], runs: int) -> float:
    """Median seconds to md5 the files (from page cache), the yardstick for diff's speed."""
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        for p in paths:
            h = hashlib.md5()
            with p.open("rb") as f:
                while block := f.read(8 * MIB):
                    h.update(block)
        times.append(time.perf_counter() - t0)
    return sorted(times)[len(times) // 2]


def changed_elements(old: Path, new: Path) -> int:
    """Elements that differ between same-named, same-sized tensors, plus every element of
    a tensor that is new or resized: the denominator of bytes per changed element."""
    a, b = Checkpoint(old), Checkpoint(new)
    try:
        total = 0
        for loc in b.tensors():
            t = loc.info
            src = a.by_name.get(t.name)
            if src is None or src.info.nbytes != t.nbytes:
                total += t.nbytes // t.width
                continue
            kind = UINT_OF_WIDTH[t.width]
            for lo in range(0, t.nbytes, 64 * MIB):
                hi = min(lo + 64 * MIB, t.nbytes)
                x = src.file.view(src.info.begin + lo, src.info.begin + hi).view(kind)
                y = loc.file.view(t.begin + lo, t.begin + hi).view(kind)
                total += int(np.count_nonzero(x != y))
                src.file.release(src.info.begin + lo, src.info.begin + hi)
                loc.file.release(t.begin + lo, t.begin + hi)
        return total
    finally:
        a.close()
        b.close()


def rsync_bytes(old: Path, new: Path, work: Path) -> int | None:
    rsync = shutil.which("rsync")
    if rsync is None:
        return None
    dest = work / "rsync-dest"
    dest.mkdir()
    shutil.copyfile(old, dest / new.name)
    res = subprocess.run([rsync, "--no-whole-file", "--stats", str(new), str(dest / new.name)],
                         capture_output=True, text=True, check=True)  # fmt: skip
    shutil.rmtree(dest)
    m = re.search(r"Total bytes sent: ([\d,.]+)", res.stdout)
    return int(re.sub(r"[,.]", "", m.group(1))) if m else None


def fast_sparse_pair(old: Path, new: Path, gib: float, frac: float = 0.02) -> None:
    """Big bf16 pair quickly: random old bits, ``frac`` of elements nudged by 1-3 ulps."""
    per = 64 * MIB // 2
    n_tensors = int(gib * 1024 / 64)
    specs = [(f"layers.{i}.weight", "BF16", (per // 4096, 4096)) for i in range(n_tensors)]

    def before(name: str) -> np.ndarray[Any, Any]:
        rng = np.random.default_rng([1, int(name.split(".")[1])])
        return rng.integers(0, 1 << 63, per // 4, dtype=np.uint64).view(np.uint16)

    def after(name: str) -> np.ndarray[Any, Any]:
        w = before(name).copy()
        rng = np.random.default_rng([2, int(name.split(".")[1])])
        pos = rng.integers(0, per, int(per * frac))
        w[pos] ^= rng.integers(1, 4, len(pos), dtype=np.uint16)
        return w

    write_safetensors(old, specs, before, {"format": "pt"})
    write_safetensors(new, specs, after, {"format": "pt"})


def median_runs(
    argvs: dict[str, list[str]],
    runs: int,
    settle: float,
    roots: dict[str, Path],
    after: Callable[[], None] | None = None,
) -> dict[str, tuple[dict[str, Any], int]]:
    """Run each checkout's standbyc ``runs`` times, alternating between checkouts; per
    checkout the JSON of the median run (by its own seconds) and the peak RSS.

    ``after`` cleans up after each run (removes the output), then the machine
    gets ``settle`` seconds: a VM that hands freed memory back to its host in
    the background makes a run that starts meanwhile 2-3x slower.
    """
    docs: dict[str, list[dict[str, Any]]] = {code: [] for code in roots}
    peak = dict.fromkeys(roots, 0)
    for _ in range(runs):
        for code, root in roots.items():
            time.sleep(settle)
            doc, _, rss = run_rusage(argvs[code], root)
            if after is not None:
                after()
            docs[code].append(doc)
            peak[code] = max(peak[code], rss)
    out = {}
    for code, ds in docs.items():
        ds.sort(key=lambda d: float(d["seconds"]))
        out[code] = (ds[len(ds) // 2], peak[code])
    return out


def measure(
    name: str,
    old: Path,
    new: Path,
    work: Path,
    *,
    rsync: bool,
    runs: int,
    settle: float,
    roots: dict[str, Path],
    changed_raw: int | None = None,
) -> list[dict[str, Any]]:
    """One row per checkout in ``roots`` (the first is this one)."""
    size = new.stat().st_size
    changed = changed_elements(old, new)
    for p in (old, new):
        warm(p)
    md5 = md5_seconds([old, new], runs)
    deltas = {code: work / f"{name}-{code}.delta" for code in roots}
    argvs = {code: ["weights", "diff", str(old), str(new), "-o", str(d)]
             for code, d in deltas.items()}  # fmt: skip
    diffs = median_runs(argvs, runs, settle, roots)
    for d in deltas.values():
        warm(d)
    applies: dict[str, dict[str, tuple[dict[str, Any], int]]] = {}
    shm = Path("/dev/shm") / f"standbyc-bench-{os.getpid()}-{name}"
    for label, out, extra in (
        ("disk", work / f"{name}.out", []),
        ("tmpfs", shm, []),
        ("tmpfs_reread", shm, ["--reread"]),
    ):
        # A fresh output path each run: replacing a file would also time freeing the old one.
        argvs = {code: ["weights", "apply", str(old), str(d), "-o", str(out), *extra]
                 for code, d in deltas.items()}  # fmt: skip
        applies[label] = median_runs(argvs, runs, settle, roots, after=lambda o=out: o.unlink())
    seed = seed_bytes(old, new)
    rs = rsync_bytes(old, new, work) if rsync else None
    rows = []
    for code in roots:
        d, d_rss = diffs[code]
        a = applies["disk"][code][0]
        row: dict[str, Any] = {
            "pair": name,
            "code": code,
            "runs": runs,
            "model_bytes": size,
            "changed_elements": changed,
            "standbyc_bytes": d["delta_bytes"],
            "bytes_per_changed": d["delta_bytes"] / changed if changed else None,
            "seed_bytes": seed,
            "rsync_bytes": rs,
            "full_copy_bytes": size,
            "md5_seconds": md5,
            "diff_seconds": d["seconds"],
            "diff_x_md5": md5 / d["seconds"],
            "diff_gb_s": size / d["seconds"] / 1e9,
            "diff_peak_rss": d_rss,
            "apply_seconds": a["seconds"],
            "apply_fsync_seconds": a["fsync_seconds"],
            "apply_gb_s": size / a["seconds"] / 1e9,
            "apply_peak_rss": max(applies[label][code][1] for label in applies),
            "tensors": d["tensors"],
            "chunks": d["chunks"],
            "chunk_payload_bytes": d.get("chunk_payload_bytes"),
            "changed_tensor_bytes": changed_raw,
        }
        for label in ("tmpfs", "tmpfs_reread"):
            row[f"apply_{label}_seconds"] = applies[label][code][0]["seconds"]
            row[f"apply_gb_s_{label}"] = size / applies[label][code][0]["seconds"] / 1e9
        rows.append(row)
    for d in deltas.values():
        d.unlink()
    return rows


def pct(n: int | None, size: int) -> str:
    return "n/a" if n is None else f"{100 * n / size:.2f}%"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rl-gib", type=float, default=1.0)
    ap.add_argument("--rss-gib", type=float, default=4.0, help="0 skips the RSS run")
    ap.add_argument("--workdir", type=Path, default=None)
    ap.add_argument("--runs", type=int, default=3, help="runs per measurement; medians")
    ap.add_argument("--settle", type=float, default=3.0, help="idle seconds before each run")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another standbyc checkout to measure beside this one")  # fmt: skip
    args = ap.parse_args()
    roots = {"this": ROOT}
    if args.baseline is not None:
        roots["baseline"] = args.baseline.resolve()
    work = Path(tempfile.mkdtemp(prefix="standbyc-bench-", dir=args.workdir))
    rows = []
    try:
        # One-step RL-like bf16 update, ~1 GiB: hidden 2048, 32k vocab.
        layers = max(1, round((args.rl_gib * 2**30 / 2 - 32000 * 2048) / (12 * 2048**2)))
        t0 = time.perf_counter()
        rl_pair(work / "rl_old", work / "rl_new", transformer_specs(layers, 2048, 32000),
                lr=5e-7)  # fmt: skip
        print(f"generated RL pair in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
        rows += measure("rl_bf16", work / "rl_old", work / "rl_new", work, rsync=True,
                        runs=args.runs, settle=args.settle, roots=roots)  # fmt: skip
        for p in ("rl_old", "rl_new"):
            (work / p).unlink()

        specs = transformer_specs(6, 1024, 16000, dtype="F32")
        trained = [s[0] for s in specs if s[0].startswith("layers.5.")]
        finetune_pair(work / "ft_old", work / "ft_new", specs, trained)
        changed = sum(int(np.prod(s[2])) * 4 for s in specs if s[0] in trained)
        rows += measure("finetune_fp32", work / "ft_old", work / "ft_new", work, rsync=True,
                        runs=args.runs, settle=args.settle, roots=roots,
                        changed_raw=changed)  # fmt: skip
        for p in ("ft_old", "ft_new"):
            (work / p).unlink()

        if args.rss_gib > 0:
            t0 = time.perf_counter()
            fast_sparse_pair(work / "big_old", work / "big_new", args.rss_gib)
            print(
                f"generated {args.rss_gib} GiB pair in {time.perf_counter() - t0:.0f} s",
                file=sys.stderr,
            )
            rows += measure(f"bf16_{args.rss_gib:g}gib", work / "big_old", work / "big_new",
                            work, rsync=False, runs=args.runs, settle=args.settle,
                            roots=roots)  # fmt: skip
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(
        f"\n{'pair':<16}{'code':<9}{'model':>10}{'standbyc':>10}{'B/chg':>7}{'seed':>9}"
        f"{'rsync':>9}{'full':>7}{'diff GB/s':>11}{'x md5':>7}{'apply GB/s disk':>17}"
        f"{'tmpfs':>7}{'+reread':>9}{'diff RSS':>10}{'apply RSS':>11}"
    )
    for r in rows:
        s = r["model_bytes"]
        per = r["bytes_per_changed"]
        print(
            f"{r['pair']:<16}{r['code']:<9}{s / 2**30:>8.2f}Gi{pct(r['standbyc_bytes'], s):>10}"
            f"{'n/a' if per is None else f'{per:.3f}':>7}"
            f"{pct(r['seed_bytes'], s):>9}{pct(r['rsync_bytes'], s):>9}{'100%':>7}"
            f"{r['diff_gb_s']:>11.2f}{r['diff_x_md5']:>7.2f}{r['apply_gb_s']:>17.2f}"
            f"{r['apply_gb_s_tmpfs']:>7.2f}"
            f"{r['apply_gb_s_tmpfs_reread']:>9.2f}"
            f"{r['diff_peak_rss'] / MIB:>8.0f}Mi{r['apply_peak_rss'] / MIB:>9.0f}Mi"
        )
    print(
        f"\nmedians of {args.runs} runs each; GB/s = model bytes / standbyc's own seconds; "
        "B/chg = delta bytes / changed elements; x md5 = md5 of both files' seconds / diff's"
    )
    record.save("weights", {"rows": rows, "cpus": os.cpu_count()})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
