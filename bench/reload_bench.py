"""A tier of three engine pods from "generation published" to "every pod serves it", per
engine, in waves, and what the tier had left meanwhile.

For each engine API (SGLang; vLLM; Triton loading a new instance beside the old one;
Triton unloading first), three pods of the tests' engine for that API (tests/sync/engines/,
on CPU, loading with transformers) serve generation 1 of a Hugging Face model directory;
generation 2 is published to nginx, then `standbyc weights sync --reload API` brings the
tier to it, once with waves of one pod (the default) and once with all three at once (how
the Job asked before waves), alternating. Reported per engine and way, medians of --runs:

- the sync's wall time, split into download, apply (stage, verify, swap) and reload, and
  each wave's time;
- from the engines' own request logs, the longest stretch during which the tier had fewer
  serving pods than its three replicas, and how long it had none. A pod is out of
  service from the request that stops it serving (SGLang's load, vLLM's pause, Triton's
  unload) until the request that lets it serve again is answered; Triton's side-by-side
  load keeps the old instance serving.

Then the failover total and the time-to-serve PLAN.md gives for the example specs, at this
revision and at the baseline.

    python bench/reload_bench.py [--baseline REV] [--runs 3] [--hidden 512 --layers 8]

Needs unshare (run as root): the sync resolves the tier's name through its own /etc/hosts.
Results go to bench/results/reload-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import record  # noqa: E402
from tests.servers import Nginx, free_port  # noqa: E402
from tests.sync import hfmodel  # noqa: E402

BASELINE = "204db08"  # the last revision that asked every pod at once
PODS = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
HOST = "bench-hot-engines.bench.svc"
MODEL = "llama"
WAYS = {  # label -> (engine module, sync flags)
    "sglang": ("sglang", ["--reload", "sglang"]),
    "vllm": ("vllm", ["--reload", "vllm"]),
    "triton side by side": ("triton", ["--reload", "triton", "--engine-model", MODEL]),
    "triton unload first": ("triton", ["--reload", "triton", "--engine-model", MODEL,
                                       "--engine-swap", "unload-first"]),
}  # fmt: skip
# Per engine: (the request that takes a pod out of service, the one that puts it back).
OUT_OF_SERVICE = {
    "sglang": ("/update_weights_from_disk", "/update_weights_from_disk"),
    "vllm": ("/pause", "/resume"),
    "triton unload first": (f"/v2/repository/models/{MODEL}/unload",
                            f"/v2/repository/models/{MODEL}/load"),
}  # fmt: skip
READY = {"sglang": "/model_info", "vllm": "/version", "triton": "/v2/health/ready"}


def standbyc(*args: str) -> tuple[dict[str, Any], float]:
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "compiler", *args, "--format", "json"],
                          capture_output=True, text=True, cwd=ROOT, check=False,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise SystemExit(f"standbyc {' '.join(args)} failed:\n{proc.stderr}{proc.stdout}")
    return json.loads(proc.stdout), took


def start(engine: str, port: int, model: Path, logs: Path) -> list[subprocess.Popen[bytes]]:
    """Three pods, a process each (as three engine containers would load at once)."""
    procs = []
    for a in PODS:
        named = ["--model-name", MODEL] if engine == "triton" else []
        argv = ["--host", a, "--port", str(port), "--model-path", str(model), "--log",
                str(logs / f"{a}.log"), *named]  # fmt: skip
        procs.append(subprocess.Popen(
            [sys.executable, "-m", f"tests.sync.engines.{engine}", json.dumps(argv)], cwd=ROOT,
            env={**os.environ, "VLLM_SERVER_DEV_MODE": "1"}, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL))  # fmt: skip
    deadline = time.monotonic() + 300
    for a, proc in zip(PODS, procs, strict=True):
        while True:
            try:
                urllib.request.urlopen(f"http://{a}:{port}{READY[engine]}", timeout=2).close()
                break
            except OSError:
                if time.monotonic() > deadline or proc.poll() is not None:
                    raise SystemExit(f"{engine} pods did not start") from None
                time.sleep(0.2)
    return procs


def outages(way: str, logs: Path) -> tuple[float, float]:
    """The longest stretch with fewer than all pods serving, and the time with none."""
    if way not in OUT_OF_SERVICE:
        return 0.0, 0.0
    stop, back = OUT_OF_SERVICE[way]
    spans = []
    for a in PODS:
        rows = [json.loads(line) for line in (logs / f"{a}.log").read_text().splitlines()]
        began = [r["at"] for r in rows if r["path"] == stop and "done" not in r]
        ended = [r["done"] for r in rows if r["path"] == back and "done" in r]
        spans += [(b, min(e for e in ended if e >= b)) for b in began]
    events = sorted([(b, 1) for b, _ in spans] + [(e, -1) for _, e in spans])
    out, longest, none, began, prev = 0, 0.0, 0.0, 0.0, 0.0
    for t, step in events:
        if out == len(PODS):
            none += t - prev
        if out == 0 and step == 1:
            began = t
        out += step
        if out == 0:
            longest = max(longest, t - began)
        prev = t
    return longest, none


def one_run(way: str, at_once: int, gens: dict[int, Path], work: Path) -> dict[str, Any]:
    engine, flags = WAYS[way]
    run = work / f"{engine}-{at_once}-{time.monotonic_ns()}"
    store, logs = run / "store", run / "logs"
    logs.mkdir(parents=True)
    nginx = Nginx(store, run / "nginx", free_port())
    store.mkdir()
    nginx.start()
    hosts = run / "hosts"
    hosts.write_text("".join(f"{a} {HOST}\n" for a in PODS))
    target = run / "weights" / "hot" / "model"
    try:
        standbyc("weights", "publish", str(gens[1]), "--to", str(store), "--generation", "1")
        standbyc("weights", "sync", "--source", nginx.url, "--generation", "1", "--target",
                 str(target))  # fmt: skip
        port = free_port()
        pods = start(engine, port, target, logs)
        try:
            published = standbyc("weights", "publish", str(gens[2]), "--to", str(store),
                                 "--generation", "2")[1]  # fmt: skip
            argv = [sys.executable, "-m", "compiler", "weights", "sync", "--source", nginx.url,
                    "--generation", "2", "--target", str(target), *flags, "--engines",
                    f"http://{HOST}:{port}", "--engine-model-path", str(target),
                    "--max-unavailable", str(at_once), "--expect-pods", "3",
                    "--format", "json"]  # fmt: skip
            t0 = time.perf_counter()
            proc = subprocess.run(
                ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                 'mount --bind "$0" /etc/hosts && exec "$@"', str(hosts), *argv],
                capture_output=True, text=True, cwd=ROOT, check=False,
                env={**os.environ, "PYTHONPATH": str(ROOT)},
            )  # fmt: skip
            wall = time.perf_counter() - t0
        finally:
            for pod in pods:
                pod.terminate()
                pod.wait(timeout=30)
    finally:
        nginx.stop()
    doc = json.loads(proc.stdout)
    if proc.returncode != 0 or doc["reload"]["failed"]:
        raise SystemExit(f"{way}: the sync failed:\n{proc.stderr}{proc.stdout}")
    longest, none = outages(way, logs)
    return {
        "publish": published,
        "total": wall,
        "download": doc["seconds_download"],
        "apply": doc["seconds_apply"],
        "reload": doc["reload"]["seconds"],
        "waves": [w["seconds"] for w in doc["reload"]["waves"]],
        "fewer_serving": longest,
        "none_serving": none,
    }


def _median(samples: list[dict[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {k: statistics.median(s[k] for s in samples)
                           for k in samples[0] if k != "waves"}  # fmt: skip
    out["waves"] = [statistics.median(w) for w in zip(*(s["waves"] for s in samples),
                                                       strict=True)]  # fmt: skip
    return out


def plan_numbers(tree: Path) -> dict[str, dict[str, Any]]:
    """Per example spec: the failover total, and the time-to-serve lines of PLAN.md."""
    out: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "compiler", "compile", str(tree / "specs"),
                        "--out", tmp, "--no-validate"], cwd=tree, capture_output=True,
                       check=True, env={**os.environ, "PYTHONPATH": str(tree)})  # fmt: skip
        for plan in sorted(Path(tmp).glob("*/*/PLAN.md")):
            text = plan.read_text()
            # PLAN.md as revisions before the failure modes wrote it, then as it is now.
            total = re.search(r"\| \*\*total\*\* \| \*\*([^*]+)\*\*", text) or re.search(
                r"serves again after ([\d.]+ (?:s|min))\)?\*\*", text
            )
            serve = re.findall(r"^- (tier \w+), from published to every pod serving it: .*?= "
                               r"([\d.]+ m?s)", text, re.MULTILINE) or re.findall(
                r"^\*\*(tier \w+): ([\d.]+ (?:m?s|min))\*\*", text, re.MULTILINE)  # fmt: skip
            out[plan.parent.name] = {"failover": total[1] if total else None,
                                     "time_to_serve": dict(serve)}  # fmt: skip
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", default=BASELINE)
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--hidden", type=int, default=512)
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--vocab", type=int, default=32000)
    args = p.parse_args()
    with tempfile.TemporaryDirectory(prefix="standbyc-reload-") as tmp:
        work = Path(tmp)
        print(f"building the model (hidden {args.hidden}, {args.layers} layers) ...", flush=True)
        gens = hfmodel.build(work / "model", hidden=args.hidden, layers=args.layers,
                             vocab=args.vocab, lr=1e-5)  # fmt: skip
        size = sum(f.stat().st_size for f in gens[2].rglob("*") if f.is_file())
        engines: dict[str, dict[str, Any]] = {}
        for way in WAYS:
            samples: dict[int, list[dict[str, Any]]] = {1: [], 3: []}
            for _ in range(args.runs):
                for at_once in (1, 3):  # alternating, so both see the same machine
                    samples[at_once].append(one_run(way, at_once, gens, work))
            engines[way] = {f"waves of {n}": _median(s) for n, s in samples.items()}
            print(f"{way}: done", flush=True)
        baseline = work / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(baseline),
                        args.baseline], check=True, capture_output=True)  # fmt: skip
        try:
            plans = {"baseline": plan_numbers(baseline), "now": plan_numbers(ROOT)}
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force",
                            str(baseline)], check=False, capture_output=True)  # fmt: skip
    results = {"runs": args.runs, "model_bytes": size, "engines": engines, "plan": plans,
               "baseline": args.baseline}  # fmt: skip
    report(results)
    record.save("reload", results)


def report(r: dict[str, Any]) -> None:
    print(f"\nmodel directory {r['model_bytes']} bytes; three pods; medians of {r['runs']}")
    print("\n| engine | waves | published -> all serve | download | apply | reload | each wave "
          "| fewer than 3 serving, longest | none serving |")  # fmt: skip
    print("|---|---|---:|---:|---:|---:|---|---:|---:|")
    for way, by in r["engines"].items():
        for label, m in by.items():
            waves = ", ".join(f"{w:.2f}" for w in m["waves"])
            print(f"| {way} | {label} | {m['total']:.2f} s | {m['download']:.3f} s | "
                  f"{m['apply']:.3f} s | {m['reload']:.2f} s | {waves} s | "
                  f"{m['fewer_serving']:.2f} s | {m['none_serving']:.2f} s |")  # fmt: skip
    print(f"\n| spec | failover at {r['baseline']} | now | time to serve now |")
    print("|---|---:|---:|---|")
    for spec, now in r["plan"]["now"].items():
        before = r["plan"]["baseline"].get(spec, {})
        serve = "; ".join(f"{t}: {s}" for t, s in now["time_to_serve"].items())
        print(f"| {spec} | {before.get('failover')} | {now['failover']} | {serve} |")


if __name__ == "__main__":
    main()
