"""End to end: publish a new generation and sync a standby through nginx on loopback,
side by side with a full copy, the seed's md5 + pickle scheme and TRL's delta format.

    python bench/sync_bench.py                 # 1 GiB RL pair, 4 GiB RSS run, medians of 3
    python bench/sync_bench.py --rss-gib 0     # skip the 4 GiB run

For each scheme: the bytes that cross the wire, the wall time of publishing (what the
sender computes and writes) and of syncing (download + apply + verify, as the scheme
does it). standbyc and the full copy run as `standbyc weights sync` processes (their
peak RSS measured); the seed and TRL are reproduced in bench/ and downloaded with plain
HTTP GETs. Nothing is rate-limited. The same run also measures the delta library's own
targets: diff speed against md5 over the same two files, and apply from page cache.
Results go to bench/results/sync-<time>.json.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import record, trl_scheme  # noqa: E402
from bench.seed_scheme import dump_changed, seed_bytes  # noqa: E402
from bench.weights_bench import fast_sparse_pair, run_rusage, warm  # noqa: E402
from compiler.weights.manifest import build_manifest  # noqa: E402
from compiler.weights.safetensors_io import Checkpoint  # noqa: E402
from compiler.weights.testing import rl_pair, transformer_specs  # noqa: E402
from tests.servers import Nginx, free_port  # noqa: E402

MIB = 1 << 20


def timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def median(samples: list[float]) -> float:
    return statistics.median(samples)


def download(url: str, dest: Path) -> int:
    """A plain HTTP GET into a file (what the seed's and TRL's receivers need)."""
    n = 0
    with urllib.request.urlopen(url, timeout=60) as resp, dest.open("wb") as out:
        while block := resp.read(MIB):
            out.write(block)
            n += len(block)
    return n


def publish(new: Path, store: Path, generation: int) -> tuple[dict[str, Any], float, int]:
    return run_rusage(["weights", "publish", str(new), "--to", str(store),
                       "--generation", str(generation)])  # fmt: skip


def sync(url: str, target: Path, generation: int) -> tuple[dict[str, Any], float, int]:
    return run_rusage(["weights", "sync", "--source", url, "--generation", str(generation),
                       "--target", str(target)])  # fmt: skip


# --- the seed's scheme: md5 per tensor, pickle of the changed tensors ----------------------


def seed_publish(old: Path, new: Path, out: Path) -> int:
    """The seed's sender: md5 of every tensor of both, pickle.dump of the changed ones."""
    with out.open("wb") as f:
        dump_changed(old, new, f)
    return out.stat().st_size


def seed_receive(base: Path, payload: Path, out: Path) -> None:
    """The receiver's side, without unpickling (which would run the sender's code): the
    changed tensors are ~all of them, so it costs writing the new checkpoint from the
    received bytes plus the base."""
    shutil.copyfile(base, out)
    with payload.open("rb") as src, out.open("r+b") as dst:
        shutil.copyfileobj(src, dst, 8 * MIB)
        dst.truncate(base.stat().st_size)
        os.fsync(dst.fileno())


# --- one scheme at a time -------------------------------------------------------------------


def standbyc_rows(
    old: Path, new: Path, nginx: Nginx, work: Path, runs: int
) -> dict[str, dict[str, Any]]:
    store = nginx.root / "standbyc"
    pubs = []
    for _ in range(runs):  # a fresh store each time: publishing G again would be a no-op
        shutil.rmtree(store, ignore_errors=True)
        publish(old.parent, store, 1)
        pubs.append(publish(new.parent, store, 2))
    pub = sorted(pubs, key=lambda r: r[1])[len(pubs) // 2]
    url = f"{nginx.url}standbyc/"
    target = work / "standby-standbyc" / "model"
    delta_runs, full_runs = [], []
    for _ in range(runs):
        shutil.rmtree(target.parent, ignore_errors=True)
        full_runs.append(sync(url, target, 2))  # nothing there: the anchor, a full copy
        sync(url, target, 1)  # back to 1 (anchor 1); untimed
        warm(target / "model.safetensors")
        delta_runs.append(sync(url, target, 2))  # 1 -> 2: one delta
    delta = sorted(delta_runs, key=lambda r: r[1])[len(delta_runs) // 2]
    full = sorted(full_runs, key=lambda r: r[1])[len(full_runs) // 2]
    assert delta[0]["route"].startswith("chain of 1 delta(s)"), delta[0]["route"]
    assert full[0]["route"].startswith("anchor 2"), full[0]["route"]
    copy_publish = median([timed(lambda: shutil.copyfile(new, work / "copy")) for _ in range(runs)])
    return {
        "standbyc": {
            "wire_bytes": delta[0]["bytes_fetched"],
            "publish_s": pub[1],
            "publish_rss": pub[2],
            "sync_s": delta[1],
            "sync_rss": delta[2],
        },
        "full copy": {
            "wire_bytes": full[0]["bytes_fetched"],
            "publish_s": copy_publish,
            "sync_s": full[1],
            "sync_rss": full[2],
        },
    }


def seed_row(old: Path, new: Path, nginx: Nginx, work: Path, runs: int) -> dict[str, Any]:
    payload = nginx.root / "seed.pkl"
    publish_s = median([timed(lambda: seed_publish(old, new, payload)) for _ in range(runs)])
    assert payload.stat().st_size == seed_bytes(old, new)
    got, out = work / "seed.pkl", work / "seed.out"

    def receive() -> None:
        download(f"{nginx.url}seed.pkl", got)
        seed_receive(old, got, out)

    return {"wire_bytes": payload.stat().st_size, "publish_s": publish_s,
            "sync_s": median([timed(receive) for _ in range(runs)])}  # fmt: skip


def trl_row(old: Path, new: Path, nginx: Nginx, work: Path, runs: int) -> dict[str, Any]:
    delta = nginx.root / "trl.safetensors"
    publish_s = median([timed(lambda: trl_scheme.encode(old, new, delta)) for _ in range(runs)])
    got, out = work / "trl.safetensors", work / "trl.out"

    def receive() -> None:
        download(f"{nginx.url}trl.safetensors", got)
        trl_scheme.apply(old, got, out)

    sync_s = median([timed(receive) for _ in range(runs)])
    # TRL's format carries tensors only (not the file's metadata): compare tensor hashes.
    assert _tensor_hashes(out) == _tensor_hashes(new)
    return {"wire_bytes": delta.stat().st_size, "publish_s": publish_s, "sync_s": sync_s}


def _tensor_hashes(path: Path) -> dict[str, bytes]:
    ckpt = Checkpoint(path)
    try:
        return {t.name: t.hash for t in build_manifest(ckpt).by_name().values()}
    finally:
        ckpt.close()


def library_targets(old: Path, new: Path, work: Path, runs: int) -> dict[str, float]:
    """Diff against md5 over the same two files; apply from page cache to tmpfs."""

    def md5_both() -> None:
        for p in (old, new):
            h = hashlib.md5()
            with p.open("rb") as f:
                while block := f.read(8 * MIB):
                    h.update(block)

    md5_s = median([timed(md5_both) for _ in range(runs)])
    delta = work / "lib.delta"
    diffs = [run_rusage(["weights", "diff", str(old), str(new), "-o", str(delta)])[0]["seconds"]
             for _ in range(runs)]  # fmt: skip
    shm = Path("/dev/shm") / f"standbyc-sync-bench-{os.getpid()}"
    applies = []
    for _ in range(runs):
        applies.append(run_rusage(["weights", "apply", str(old), str(delta), "-o", str(shm)])[0])
        shm.unlink()
    size = new.stat().st_size
    apply_s = median([float(a["seconds"]) for a in applies])
    return {
        "md5_both_s": md5_s,
        "diff_s": median(diffs),
        "diff_vs_md5": md5_s / median(diffs),
        "apply_s": apply_s,
        "apply_gb_s": size / apply_s / 1e9,
    }


def rss_run(gib: float, nginx: Nginx, work: Path) -> dict[str, Any]:
    old, new = work / "big_old", work / "big_new"
    fast_sparse_pair(old, new, gib)
    store = nginx.root / "big"
    publish(old, store, 1)
    pub = publish(new, store, 2)
    target = work / "standby-big" / "model"
    url = f"{nginx.url}big/"
    full = sync(url, target, 1)
    delta = sync(url, target, 2)
    for p in (old, new):
        p.unlink()
    return {
        "gib": gib,
        "publish_rss": pub[2],
        "sync_full_rss": full[2],
        "sync_delta_rss": delta[2],
        "sync_delta_s": delta[1],
        "sync_full_s": full[1],
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--gib", type=float, default=1.0, help="size of the RL pair")
    ap.add_argument("--rss-gib", type=float, default=4.0, help="0 skips the RSS run")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="standbyc-sync-bench-", dir=args.workdir))
    nginx = Nginx(work / "served", work / "nginx", free_port())
    nginx.root.mkdir()
    nginx.start()
    try:
        # Each generation is a model directory holding model.safetensors, as a publish
        # reads it and a sync writes it.
        old, new = work / "old" / "model.safetensors", work / "new" / "model.safetensors"
        old.parent.mkdir()
        new.parent.mkdir()
        layers = max(1, round((args.gib * 2**30 / 2 - 32000 * 2048) / (12 * 2048**2)))
        rl_pair(old, new, transformer_specs(layers, 2048, 32000), lr=5e-7)
        for p in (old, new):
            warm(p)
        rows = standbyc_rows(old, new, nginx, work, args.runs)
        rows["seed md5+pickle"] = seed_row(old, new, nginx, work, args.runs)
        rows["TRL delta"] = trl_row(old, new, nginx, work, args.runs)
        lib = library_targets(old, new, work, args.runs)
        size = new.stat().st_size
        rss = rss_run(args.rss_gib, nginx, work) if args.rss_gib > 0 else None
    finally:
        nginx.stop()
        shutil.rmtree(work, ignore_errors=True)

    print(f"\nmodel: {size / 2**30:.2f} GiB bf16, one RL step; medians of {args.runs} runs")
    print(f"{'scheme':<18}{'on the wire':>14}{'% of model':>12}{'publish s':>11}{'sync s':>9}")
    for name, r in rows.items():
        print(f"{name:<18}{r['wire_bytes']:>14}{100 * r['wire_bytes'] / size:>11.2f}%"
              f"{r['publish_s']:>11.2f}{r['sync_s']:>9.2f}")  # fmt: skip
    seed_saving = 1 - rows["seed md5+pickle"]["wire_bytes"] / size
    ours = 1 - rows["standbyc"]["wire_bytes"] / size
    print(f"failover bandwidth saved vs a full copy: seed scheme {100 * seed_saving:.1f}%, "
          f"standbyc {100 * ours:.2f}%")  # fmt: skip
    print(f"diff {lib['diff_s']:.2f} s vs md5 of both files {lib['md5_both_s']:.2f} s: "
          f"{lib['diff_vs_md5']:.2f}x; apply to tmpfs {lib['apply_gb_s']:.2f} GB/s")  # fmt: skip
    if rss:
        print(f"{rss['gib']:g} GiB: peak RSS publish {rss['publish_rss'] / MIB:.0f} MiB, "
              f"sync full {rss['sync_full_rss'] / MIB:.0f} MiB, "
              f"sync delta {rss['sync_delta_rss'] / MIB:.0f} MiB")  # fmt: skip
    record.save("sync", {"model_bytes": size, "rows": rows, "library": lib, "rss": rss,
                         "runs": args.runs, "cpus": os.cpu_count()})  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
