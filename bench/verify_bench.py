"""What verifying a signed generation costs a sync, and what it adds to the image.

For two models, one generation apart, signed by `weights publish --sign-key` with each
hash the library offers publish (BLAKE3, publish's default; SHA-256, the library's own
default and what a pipeline's `model_signing sign` lists):

- the test model of bench/model_dir_bench.py (a Hugging Face Llama directory, hidden 512,
  8 layers, a 32,000-token vocabulary: about 100 MB of bf16 weights, with its tokenizer);
- a 1 GiB bf16 model (bench/weights_bench.py's RL pair: 2% of elements nudged) in a
  directory with a config and a tokenizer file;

a standby one generation behind syncs through nginx on loopback with the `standbyc`
command the Jobs run, without `--verify` (the baseline, in the same run) and with it
(`--verify key`), the target reset between runs. Reported: medians of the whole command's
wall time, the verification's own seconds (hashing the staged directory and checking the
signature, from the command's JSON), the import of model_signing (paid once per signed
sync), and a sync that finds the directory already verified. Then the installed size the
dependency adds to the image (Dockerfile): the distributions model-signing and pyopenssl
bring besides the rest of the image's list, as installed here.

    python bench/verify_bench.py [--runs 3] [--gib 1.0] [--skip-hf]

Results go to bench/results/verify-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import record  # noqa: E402
from bench.weights_bench import fast_sparse_pair  # noqa: E402
from compiler.weights.sync.signed import Trust, library_verify, read_bundle  # noqa: E402
from tests.servers import Nginx, free_port  # noqa: E402
from tests.sync import hfmodel  # noqa: E402
from tests.sync.image import LISTED, closure  # noqa: E402
from tests.sync.signing import ec_key  # noqa: E402

STANDBYC = [sys.executable, "-m", "compiler"]
HASHES = ("blake3", "sha256")


def run(argv: list[str]) -> tuple[dict[str, Any], float, float]:
    """Run standbyc: its JSON, wall seconds, CPU seconds (user and system, every thread:
    on a shared machine the steadier of the two)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    proc = subprocess.run([*STANDBYC, *argv, "--format", "json"], capture_output=True,
                          text=True, check=False, cwd=ROOT)  # fmt: skip
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    if proc.returncode != 0:
        raise SystemExit(f"standbyc {' '.join(argv)} failed ({proc.returncode}):\n"
                         f"{proc.stdout}{proc.stderr}")  # fmt: skip
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc, wall, cpu


def one_gib_model(work: Path, gib: float) -> dict[int, Path]:
    out = {g: work / f"big-g{g}" for g in (1, 2)}
    for d in out.values():
        d.mkdir()
        (d / "config.json").write_text(json.dumps({"model_type": "llama", "hidden_size": 4096}))
        (d / "tokenizer.json").write_text(json.dumps({"version": "1.0", "model": {}}) * 2000)
    fast_sparse_pair(out[1] / "model.safetensors", out[2] / "model.safetensors", gib)
    return out


def measure(
    gens: dict[int, Path], work: Path, key: Path, runs: int, hashes: tuple[str, ...]
) -> dict[str, Any]:
    """Per hash: the one-generation sync without and with --verify, and its parts."""
    out: dict[str, Any] = {}
    work.mkdir(parents=True, exist_ok=True)
    for hashing in hashes:
        nginx = Nginx(work / f"store-{hashing}", work / f"nginx-{hashing}", free_port())
        nginx.root.mkdir()
        nginx.start()
        try:
            out[hashing] = _sync_runs(gens, work / hashing, nginx, key, hashing, runs=runs)
        finally:
            nginx.stop()
            shutil.rmtree(work / hashing, ignore_errors=True)
            shutil.rmtree(nginx.root, ignore_errors=True)
    return out


def _sync_runs(
    gens: dict[int, Path], work: Path, nginx: Nginx, key: Path, hashing: str, *, runs: int
) -> dict[str, Any]:
    signed = {}
    for g, src in gens.items():
        signed[g] = work / f"g{g}"
        shutil.copytree(src, signed[g])
        doc, publish_s, _ = run(["weights", "publish", str(signed[g]), "--to", str(nginx.root),
                              "--generation", str(g), "--sign-key", str(key),
                              "--model", "bench", "--sign-hash", hashing])  # fmt: skip
    base = work / "standby"
    target = base / "hot/llama"
    trust = ["--verify", "key", "--verify-trust", str(key.with_suffix(".pub"))]
    sync = ["weights", "sync", "--source", nginx.url, "--target", str(target)]
    run([*sync, "--generation", "1", *trust])
    pristine = work / "pristine"
    shutil.copytree(base, pristine)
    samples: dict[str, list[tuple[float, float]]] = {"plain": [], "verified": []}
    inner: list[float] = []
    for _ in range(runs):
        for mode in ("plain", "verified"):  # alternated: the same conditions for both
            shutil.rmtree(base)
            shutil.copytree(pristine, base)
            argv = [*sync, "--generation", "2", *(trust if mode == "verified" else [])]
            doc, wall, cpu = run(argv)
            assert doc["status"] == "updated", doc
            samples[mode].append((wall, cpu))
            if mode == "verified":
                inner.append(doc["verified"]["seconds"])
    current = [run([*sync, "--generation", "2", *trust])[1] for _ in range(runs)]
    out: dict[str, Any] = {"publish_seconds_last": publish_s, "samples": samples}
    # Medians, and minima: on a machine others load, the least a run took is the closest
    # to what it costs alone.
    for i, what in enumerate(("wall", "cpu")):
        for stat, f in (("median", statistics.median), ("min", min)):
            plain = f(x[i] for x in samples["plain"])
            verified = f(x[i] for x in samples["verified"])
            out[f"{what}_{stat}"] = {"plain": plain, "verified": verified,
                                     "added": verified - plain,
                                     "share": (verified - plain) / plain}  # fmt: skip
    # Each verified run beside the plain run just before it: paired, the load of a shared
    # machine moves both alike.
    pairs = [v[0] - p[0] for p, v in zip(samples["plain"], samples["verified"], strict=True)]
    out["paired_added_median"] = statistics.median(pairs)
    out["verify_in_sync"] = statistics.median(inner)
    out["library_verify"] = library_seconds(target, key, runs)
    out["current_verified_cached"] = statistics.median(current)
    return out


def library_seconds(target: Path, key: Path, runs: int) -> float:
    """The model-signing library's verification of the synced directory alone (signature,
    every file hashed from page cache), in this process, the import already paid."""
    import model_signing.verifying  # noqa: F401, PLC0415

    trust = Trust("key", key.with_suffix(".pub"))
    bundle = read_bundle(target / "model.sig")
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        library_verify(target, trust, bundle)
        times.append(time.perf_counter() - t0)
    return min(times)


def import_seconds(runs: int) -> float:
    code = "import time; t = time.perf_counter(); import model_signing.verifying; " \
           "print(time.perf_counter() - t)"  # fmt: skip
    out = [float(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                                check=True).stdout) for _ in range(runs)]  # fmt: skip
    return min(out)


def installed_size() -> dict[str, Any]:
    """Bytes on disk of the distributions model-signing and pyopenssl add to the image."""
    added = closure(LISTED) - closure(LISTED - {"model-signing", "pyopenssl"})
    sizes = {}
    for name in sorted(added):
        dist = metadata.distribution(name)
        paths = [Path(str(dist.locate_file(f))) for f in dist.files or []]
        sizes[name] = sum(p.stat().st_size for p in paths if p.is_file())
    return {"bytes": sum(sizes.values()), "distributions": sizes}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    p.add_argument("--gib", type=float, default=1.0)
    p.add_argument("--skip-hf", action="store_true", help="only the 1 GiB model")
    p.add_argument("--hash", choices=HASHES, help="only this one (default: both)")
    args = p.parse_args()
    results: dict[str, Any] = {"cores": os.cpu_count(), "load": os.getloadavg()[0]}
    with tempfile.TemporaryDirectory(prefix="standbyc-verify-") as tmp:
        work = Path(tmp)
        key = ec_key(work / "publisher.key")
        results["import_model_signing"] = import_seconds(5)
        models = {}
        if not args.skip_hf:
            print("building the 100 MB test model ...", flush=True)
            models["hf-100MB"] = hfmodel.build(work / "hf", hidden=512, layers=8, vocab=32000,
                                               lr=1e-5)  # fmt: skip
        print(f"building the {args.gib:g} GiB model ...", flush=True)
        models[f"bf16-{args.gib:g}GiB"] = one_gib_model(work, args.gib)
        for name, gens in models.items():
            size = sum(f.stat().st_size for f in gens[2].rglob("*") if f.is_file())
            print(f"{name}: {size} bytes", flush=True)
            hashes = (args.hash,) if args.hash else HASHES
            results[name] = {"bytes": size, **measure(gens, work / name, key, args.runs, hashes)}
    results["installed"] = installed_size()
    results["load_after"] = os.getloadavg()[0]
    report(results)
    record.save("verify", results)


def report(r: dict[str, Any]) -> None:
    print(f"\nimport model_signing.verifying: {r['import_model_signing']:.2f} s (least of 5)")
    print(
        "\n| model | hash | | sync | sync --verify | added | CPU: sync | --verify | added | "
        "in the sync | library alone | already verified |"
    )
    print("|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for name, m in r.items():
        if not isinstance(m, dict) or not set(HASHES) & set(m):
            continue
        for h in (h for h in HASHES if h in m):
            s = m[h]
            for stat in ("median", "min"):
                cells = [f"{s[w]['plain']:.2f} s | {s[w]['verified']:.2f} s | "
                         f"+{s[w]['added']:.2f} s ({100 * s[w]['share']:.0f}%)"
                         for w in (f"wall_{stat}", f"cpu_{stat}")]  # fmt: skip
                print(f"| {name} | {h} | {stat} | {' | '.join(cells)} | "
                      f"{s['verify_in_sync']:.2f} s | {s['library_verify']:.2f} s | "
                      f"{s['current_verified_cached']:.2f} s |")  # fmt: skip
            print(f"| {name} | {h} | paired | | | +{s['paired_added_median']:.2f} s | | | | | | |")
    i = r["installed"]
    print(
        f"\ninstalled size model-signing and pyopenssl add to the image: "
        f"{i['bytes'] / 1e6:.1f} MB ({len(i['distributions'])} distributions)"
    )
    for name, n in sorted(i["distributions"].items(), key=lambda x: -x[1])[:8]:
        print(f"  {name}: {n / 1e6:.1f} MB")
    print(f"load average {r['load']:.1f} before, {r['load_after']:.1f} after, "
          f"{r['cores']} cores")  # fmt: skip


if __name__ == "__main__":
    main()
