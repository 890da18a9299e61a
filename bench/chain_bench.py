"""A 64-generation chain from real training: what a lagging standby fetches, and what the
store holds.

    python bench/chain_bench.py                    # 64 generations, medians of 3 syncs
    python bench/chain_bench.py --generations 16 --runs 1   # a quick look

A small transformer (about 3.7M parameters) is trained with torch's Adam on a synthetic
next-token task; after each optimizer step the bf16 weights are saved as a generation.
Every generation is published into four stores: the defaults (merged deltas, greedy;
anchors by drift), today's planner (no merged deltas, an anchor every 10th generation),
anchors by drift without merged deltas, and every merged delta in the window. Skip
deltas (from G-1, G-2, G-4, ... G-64 into every G) are built with the same merge and
their routes computed, for the store-bytes trade-off. Then standbys 1, 4, 16 and 64
generations behind sync the newest through nginx (``standbyc weights sync``, its wall
time), beside a full copy and TRL's format (a chain of its one-step deltas, downloaded
and applied). Results go to bench/results/chain-<time>.json.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import record, trl_scheme  # noqa: E402
from bench.sync_bench import _tensor_hashes, download  # noqa: E402
from bench.weights_bench import run_rusage  # noqa: E402
from compiler.weights.compose import merge  # noqa: E402
from compiler.weights.diff import diff  # noqa: E402
from compiler.weights.sync.index import read_index  # noqa: E402
from compiler.weights.sync.merge_policy import MergePolicy  # noqa: E402
from compiler.weights.sync.publish import PublishOptions, publish  # noqa: E402
from compiler.weights.sync.route import plan_route  # noqa: E402
from compiler.weights.sync.stores.directory import DirectoryReader  # noqa: E402
from tests.servers import Nginx, free_port  # noqa: E402

BEHIND = (1, 4, 16, 64)
VOCAB, DIM, LAYERS = 4096, 256, 2

# name -> publish options
STORES: dict[str, dict[str, Any]] = {
    "merged": {},  # the defaults
    "today": {"merge": MergePolicy("off"), "anchor_every": 10, "anchor_drift": 0.0},
    "drift": {"merge": MergePolicy("off")},
    "all": {"merge": MergePolicy("all")},
}


def train(out: Path, generations: int, lr: float, seed: int) -> list[Path]:
    """``generations`` model directories, one Adam step apart, bf16 weights."""
    import torch  # noqa: PLC0415 (the bench's optional dependency)
    from safetensors.torch import save_file  # noqa: PLC0415

    torch.manual_seed(seed)
    layer = torch.nn.TransformerEncoderLayer(DIM, 4, 4 * DIM, dropout=0.0, batch_first=True)
    model = torch.nn.ModuleDict({
        "embed": torch.nn.Embedding(VOCAB, DIM),
        "blocks": torch.nn.TransformerEncoder(layer, LAYERS, enable_nested_tensor=False),
        "head": torch.nn.Linear(DIM, VOCAB, bias=False),
    })  # fmt: skip
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    # The task: the next token is a fixed function of the current one, so the loss falls.
    table = torch.randint(0, VOCAB, (VOCAB,))
    paths = []
    for g in range(1, generations + 1):
        if g > 1:
            x = torch.randint(0, VOCAB, (16, 32))
            logits = model["head"](model["blocks"](model["embed"](x)))
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, VOCAB), table[x].reshape(-1)
            )
            opt.zero_grad()
            loss.backward()
            opt.step()
        d = out / f"g{g}"
        d.mkdir(parents=True)
        state = {
            k: v.detach().to(torch.bfloat16).contiguous() for k, v in model.state_dict().items()
        }
        save_file(state, str(d / "model.safetensors"), metadata={"format": "pt", "step": str(g)})
        (d / "config.json").write_text(json.dumps({"vocab": VOCAB, "dim": DIM, "layers": LAYERS}))
        paths.append(d)
    return paths


def store_bytes(store: Path) -> int:
    return sum(p.stat().st_size for p in store.rglob("*") if p.is_file())


def publish_all(models: list[Path], store: Path, opts: dict[str, Any]) -> dict[str, Any]:
    sizes, seconds, merges = [], [], []
    for g, model in enumerate(models, start=1):
        t0 = time.perf_counter()
        stats = publish(model, store, g, PublishOptions(**opts))
        seconds.append(time.perf_counter() - t0)
        sizes.append(store_bytes(store))
        merges.append(stats.merge_seconds)
    index = read_index(DirectoryReader(store))
    assert index is not None
    latest = index.generations[index.latest]
    return {
        "store_bytes": sizes[-1],
        "store_bytes_median": statistics.median(sizes),
        "anchors": sorted(g for g, gen in index.generations.items() if gen.anchor),
        "merged_into_latest": sorted(m.base for m in latest.merged),
        "merged_bytes": sum(m.file.size for m in latest.merged),
        "publish_s_median": statistics.median(seconds),
        "merge_s_median": statistics.median(merges),
    }


def skip_deltas(today: Path, work: Path, latest: int) -> dict[str, Any]:
    """Skip deltas 2^j back into every generation, merged from the one-step ones."""
    index = read_index(DirectoryReader(today))
    assert index is not None
    span: dict[tuple[int, int], Path] = {}
    for g in range(2, latest + 1):
        delta = index.generations[g].delta
        assert delta is not None
        span[g - 1, g] = today / delta.file.path
        j = 2
        while g - j >= 1:
            half = g - j // 2
            out = work / f"skip-{g - j}-{g}.delta"
            merge(span[g - j, half], span[half, g], out)
            span[g - j, g] = out
            j *= 2
    extra = sum(p.stat().st_size for (f, g), p in span.items() if g - f > 1)

    def fetched(start: int) -> int:
        best = {start: 0}
        heap = [(0, start)]
        while heap:
            cost, g = heapq.heappop(heap)
            if g == latest:
                return cost
            for (f, t), p in span.items():
                if f == g and cost + p.stat().st_size < best.get(t, 1 << 62):
                    best[t] = cost + p.stat().st_size
                    heapq.heappush(heap, (best[t], t))
        raise AssertionError("no route")

    every = range(1, min(64, latest - 1) + 1)
    return {"extra_store_bytes": extra, "fetched": {k: fetched(latest - k) for k in every}}


def route_ratios(stores: Path, latest: int) -> dict[str, Any]:
    """For every standby 1..64 behind: the planned route's bytes over the direct delta's
    (the "all" store's merged delta from its generation, or the one-step delta)."""
    full = read_index(DirectoryReader(stores / "all"))
    assert full is not None
    top = full.generations[latest]
    direct = {latest - m.base: m.file.size for m in top.merged}
    assert top.delta is not None
    direct[1] = top.delta.file.size
    out: dict[str, Any] = {"direct": direct}
    for name in ("merged", "today", "drift"):
        index = read_index(DirectoryReader(stores / name))
        assert index is not None
        ratios = {
            k: plan_route(index, index.generations[latest - k].weights.digest, latest).nbytes / d
            for k, d in sorted(direct.items())
        }
        worst = max(ratios, key=lambda k: ratios[k])
        out[name] = {"ratios": ratios, "worst_behind": worst, "worst": ratios[worst]}
    return out


def sync(url: str, target: Path, generation: int) -> tuple[dict[str, Any], float]:
    doc, wall, _ = run_rusage(["weights", "sync", "--source", url, "--generation",
                               str(generation), "--target", str(target)])  # fmt: skip
    return doc, wall


def standby_rows(url: str, work: Path, latest: int, runs: int) -> dict[int, dict[str, Any]]:
    out = {}
    for k in BEHIND:
        samples = []
        for r in range(runs):
            target = work / f"standby-{k}-{r}" / "model"
            sync(url, target, latest - k)  # the standby as it was; untimed
            samples.append(sync(url, target, latest))
            shutil.rmtree(target.parent)
        doc, wall = sorted(samples, key=lambda s: s[1])[len(samples) // 2]
        assert doc["status"] == "updated", doc
        out[k] = {"bytes": _weights_bytes(doc), "fetched": int(doc["bytes_fetched"]),
                  "sync_s": wall, "route": doc["route"]}  # fmt: skip
    return out


def full_row(url: str, work: Path, latest: int, runs: int) -> dict[str, Any]:
    samples = []
    for r in range(runs):
        target = work / f"full-{r}" / "model"
        samples.append(sync(url, target, latest))
        shutil.rmtree(target.parent)
    doc, wall = sorted(samples, key=lambda s: s[1])[len(samples) // 2]
    return {"bytes": _weights_bytes(doc), "fetched": int(doc["bytes_fetched"]), "sync_s": wall,
            "route": doc["route"]}  # fmt: skip


def _weights_bytes(doc: dict[str, Any]) -> int:
    """The route's weight bytes (what it chose by); ``bytes_fetched`` adds index.json."""
    m = re.match(r"[^:]*: (\d+) bytes", str(doc["route"]))
    assert m is not None, doc["route"]
    return int(m.group(1))


def trl_rows(models: list[Path], nginx: Nginx, work: Path, runs: int) -> dict[int, dict[str, Any]]:
    """TRL's format as a store of its one-step deltas: a standby k behind applies k."""
    served = nginx.root / "trl"
    served.mkdir()
    weights = [m / "model.safetensors" for m in models]
    sizes = {}
    for g in range(1, len(weights)):
        sizes[g + 1] = trl_scheme.encode(
            weights[g - 1], weights[g], served / f"{g + 1}.safetensors"
        )
    latest = len(weights)
    rows = {}
    for k in BEHIND:
        times = []
        for _ in range(runs):
            base = work / "trl-base.safetensors"
            shutil.copyfile(weights[latest - k - 1], base)
            t0 = time.perf_counter()
            for g in range(latest - k + 1, latest + 1):
                got = work / "trl-got.safetensors"
                download(f"{nginx.url}trl/{g}.safetensors", got)
                nxt = work / "trl-next.safetensors"
                trl_scheme.apply(base, got, nxt)
                nxt.replace(base)
            times.append(time.perf_counter() - t0)
            assert _tensor_hashes(base) == _tensor_hashes(weights[-1])  # tensors only
        rows[k] = {"bytes": sum(sizes[g] for g in range(latest - k + 1, latest + 1)),
                   "sync_s": statistics.median(times)}  # fmt: skip
    return rows


def direct_sizes(models: list[Path], work: Path) -> dict[int, int]:
    latest = len(models)
    out = {}
    for k in BEHIND:
        path = work / f"direct-{k}.delta"
        diff(models[-1] / "model.safetensors", path,
             old_path=models[latest - k - 1] / "model.safetensors")  # fmt: skip
        out[k] = path.stat().st_size
        path.unlink()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--generations", type=int, default=64, help="one-step updates (default 64)")
    ap.add_argument("--lr", type=float, default=1e-5, help="Adam's learning rate")
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--workdir", type=Path, default=None)
    args = ap.parse_args()
    global BEHIND  # noqa: PLW0603 (a short run looks at the standbys it has)
    BEHIND = tuple(k for k in BEHIND if k <= args.generations)
    work = Path(tempfile.mkdtemp(prefix="standbyc-chain-bench-", dir=args.workdir))
    nginx = Nginx(work / "served", work / "nginx", free_port())
    nginx.root.mkdir()
    nginx.start()
    try:
        t0 = time.perf_counter()
        models = train(work / "models", args.generations + 1, args.lr, seed=0)
        train_s = time.perf_counter() - t0
        latest = len(models)
        model_bytes = (models[-1] / "model.safetensors").stat().st_size
        stores = {n: publish_all(models, nginx.root / n, o) for n, o in STORES.items()}
        skip = skip_deltas(nginx.root / "today", work, latest)
        ratios = route_ratios(nginx.root, latest)
        sk = {k: skip["fetched"][k] / d for k, d in ratios["direct"].items()}
        worst = max(sk, key=lambda k: sk[k])
        ratios["skip"] = {"ratios": sk, "worst_behind": worst, "worst": sk[worst]}
        direct = direct_sizes(models, work)
        rows = {
            "merged deltas": standby_rows(f"{nginx.url}merged/", work, latest, args.runs),
            "chain/anchor (today)": standby_rows(f"{nginx.url}today/", work, latest, args.runs),
            "TRL one-step chain": trl_rows(models, nginx, work, args.runs),
        }
        full = full_row(f"{nginx.url}merged/", work, latest, args.runs)
    finally:
        nginx.stop()
        shutil.rmtree(work, ignore_errors=True)

    print(f"\nmodel: {model_bytes / 2**20:.1f} MiB bf16, {args.generations} Adam steps at "
          f"lr {args.lr:g} (trained in {train_s:.0f} s); sync medians of {args.runs}")  # fmt: skip
    print(f"{'behind':>6} {'direct delta':>13} " + " ".join(f"{n:>30}" for n in rows)
          + f" {'full copy':>22} {'skip deltas':>12}")  # fmt: skip
    for k in BEHIND:
        cells = [f"{r[k]['bytes']:>11} ({r[k]['bytes'] / direct[k]:4.2f}x) {r[k]['sync_s']:5.2f} s"
                 for r in rows.values()]  # fmt: skip
        print(f"{k:>6} {direct[k]:>13} " + " ".join(f"{c:>30}" for c in cells)
              + f" {full['bytes']:>12} {full['sync_s']:5.2f} s"
              + f" {skip['fetched'][k] / direct[k]:>11.2f}x")  # fmt: skip
    index_bytes = full["fetched"] - full["bytes"]
    print(f"(weight bytes; each sync also fetches index.json and config.json: {index_bytes} B)")
    print("\nworst route over the direct delta, any standby 1..64 behind:")
    for name in ("merged", "today", "drift", "skip"):
        r = ratios[name]
        print(f"  {name:<7} {r['worst']:.2f}x ({r['worst_behind']} behind)")
    print("\nstore after the last publish (bytes; per generation listed):")
    for name, s in stores.items():
        print(f"  {name:<7} {s['store_bytes']:>11} ({s['store_bytes'] / latest / model_bytes:6.1%}"
              f" of the model per generation) anchors {s['anchors']}; merged into the latest: "
              f"{len(s['merged_into_latest'])} ({s['merged_bytes']} bytes); publish "
              f"{s['publish_s_median']:.2f} s median, merging "
              f"{s['merge_s_median']:.2f} s")  # fmt: skip
    print(
        f"  skip deltas (2^j back into every generation): {skip['extra_store_bytes']} bytes "
        "beside the one-step deltas"
    )
    record.save("chain", {
        "model_bytes": model_bytes, "generations": args.generations, "lr": args.lr,
        "runs": args.runs, "cpus": os.cpu_count(), "direct_delta_bytes": direct,
        "standbys": rows, "full_copy": full, "stores": stores, "skip_deltas": skip,
        "route_ratios": ratios,
    })  # fmt: skip
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
