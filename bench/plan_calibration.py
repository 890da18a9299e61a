"""The failover plan's measured defaults, measured again: what a publish writes and signs
per second, what a sync receives and rebuilds a model directory at, what a signature check
hashes at (compiler/failover/calibration.py), on a multi-GiB model, beside `cp -r` and `cat`
of the same directory in the same run.

A model directory of ``--gib`` GiB in 3 bf16 shards with their index, and the next
generation with 2% of its elements nudged (tests/sync/bigmodel.py); per run: generation 1
published and synced (a new standby), then generation 2 published (a full anchor and the
delta, as the publisher writes today) and synced by a standby one generation behind,
through nginx on loopback at the rate limit the example spec's hot tier gets, with and
without `--verify key`. `cp` and `cat` read from disk (the page cache dropped, where root
may); the syncs run with the page cache full of what was written before, as on a node.
Reported: each step's median seconds, and the rates measured (model bytes / seconds) beside
the ones compiler/failover/calibration.py ships.

    python bench/plan_calibration.py [--gib 3] [--runs 3]

Results go to bench/results/plan-calibration-<time>.json.
"""

from __future__ import annotations

import argparse
import contextlib
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
from compiler.failover import calibration  # noqa: E402
from tests.servers import Nginx, free_port  # noqa: E402
from tests.sync import bigmodel  # noqa: E402
from tests.sync.signing import ec_key  # noqa: E402

STANDBYC = [sys.executable, "-m", "compiler"]
RATE = "12500Mbit/s"  # the example spec's hot tier: 25 Gbit/s x 50%


def run(*argv: str) -> tuple[dict[str, Any], float]:
    t0 = time.perf_counter()
    proc = subprocess.run([*STANDBYC, *argv, "--format", "json"], capture_output=True,
                          text=True, check=False, cwd=ROOT)  # fmt: skip
    wall = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"standbyc {' '.join(argv)} failed:\n{proc.stdout}{proc.stderr}")
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc, wall


def timed(argv: list[str]) -> float:
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    return time.perf_counter() - t0


def flush() -> None:
    """Dirty pages written before a step are written back before it is timed. The page
    cache is left full, as a node's is: a sync on a node with an empty one rebuilds about
    twice as fast (measured here: 3.1 s against 7.3 s for 2 GiB)."""
    os.sync()


def drop_page_cache() -> None:
    """Best effort: a read measured from the page cache is not a read from disk."""
    subprocess.run(["sync"], check=False)
    with contextlib.suppress(OSError):
        Path("/proc/sys/vm/drop_caches").write_text("3\n")


def one_run(gens: dict[int, Path], work: Path, key: Path, nginx: Nginx) -> dict[str, float]:
    out: dict[str, float] = {}
    copy = work / "copy"
    drop_page_cache()
    out["cp"] = timed(["cp", "-r", str(gens[2]), str(copy)])
    shutil.rmtree(copy)
    drop_page_cache()
    files = sorted(str(p) for p in gens[2].iterdir())
    out["cat"] = timed(["sh", "-c", 'cat "$@" > /dev/null', "cat", *files])
    for signed in (False, True):
        store = nginx.root / ("signed" if signed else "plain")
        sign = ["--sign-key", str(key), "--model", "calibrated"] if signed else []
        run("weights", "publish", str(gens[1]), "--to", str(store), "--generation", "1", *sign)
        _, wall = run("weights", "publish", str(gens[2]), "--to", str(store),
                      "--generation", "2", *sign)  # fmt: skip
        out["publish_signed" if signed else "publish"] = wall
        target = work / "standby" / "model"
        verify = ["--verify", "key", "--verify-trust", str(key.with_suffix(".pub"))]
        sync = ["weights", "sync", "--source", f"{nginx.url}{store.name}/", "--target",
                str(target), "--rate-limit", RATE, *(verify if signed else [])]  # fmt: skip
        flush()
        doc, _ = run(*sync, "--generation", "1")
        if not signed:  # a new standby: the whole model fetched, verified and placed
            out["sync_new_download"] = doc["seconds_download"]
            out["sync_new_apply"] = doc["seconds_apply"]
        flush()
        doc, wall = run(*sync, "--generation", "2")
        assert doc["status"] == "updated", doc
        tag = "_signed" if signed else ""
        out[f"sync{tag}"] = wall
        out[f"sync_download{tag}"] = doc["seconds_download"]
        out[f"sync_apply{tag}"] = doc["seconds_apply"]
        if signed:
            out["verify"] = doc["verified"]["seconds"]
        shutil.rmtree(work / "standby")
        shutil.rmtree(store)
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--gib", type=float, default=3.0)
    p.add_argument("--runs", type=int, default=3)
    args = p.parse_args()
    results: dict[str, Any] = {"cores": os.cpu_count(), "load": os.getloadavg()[0],
                               "gib": args.gib}  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="standbyc-calibration-") as tmp:
        work = Path(tmp)
        gens = bigmodel.pair(work / "model", args.gib)
        size = bigmodel.size(gens[2])
        key = ec_key(work / "publisher.key")
        nginx = Nginx(work / "store", work / "nginx", free_port())
        nginx.root.mkdir()
        nginx.start()
        try:
            runs = [one_run(gens, work, key, nginx) for _ in range(args.runs)]
        finally:
            nginx.stop()
    med = {k: statistics.median(r[k] for r in runs) for k in runs[0]}
    rates = {
        "publish": size / med["publish"],
        "sign": size / (med["publish_signed"] - med["publish"]),
        "receive": size / med["sync_new_download"],
        "rebuild": size / med["sync_apply"],
        "place": size / med["sync_new_apply"],
        "verify": size / med["verify"],
        "cp": size / med["cp"],
        "cat": size / med["cat"],
    }
    shipped = {"publish": calibration.PUBLISH.value, "sign": calibration.SIGN.value,
               "receive": calibration.RECEIVE.value, "rebuild": calibration.REBUILD.value,
               "place": calibration.PLACE.value, "verify": calibration.VERIFY.value}  # fmt: skip
    results |= {"model_bytes": size, "runs": runs, "median_seconds": med,
                "rates_bytes_per_second": rates, "shipped": shipped}  # fmt: skip
    print(f"model {size / 2**30:.2f} GiB, {args.runs} run(s), medians:")
    for k, v in med.items():
        print(f"  {k:22} {v:8.2f} s")
    print("rates (bytes/s): measured now vs shipped in compiler/failover/calibration.py")
    for k, v in rates.items():
        print(f"  {k:8} {v / 1e9:6.2f} GB/s" + (f"   shipped {shipped[k] / 1e9:.2f} GB/s"
                                                if k in shipped else ""))  # fmt: skip
    print(
        f"publish / cp: {med['publish'] / med['cp']:.2f}x; sync of a generation / cp: "
        f"{med['sync'] / med['cp']:.2f}x"
    )
    record.save("plan-calibration", results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
