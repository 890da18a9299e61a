"""Sync, publish and compile under hostile stores, bad input and full disks: each case run
by this revision and by a baseline revision, side by side.

For each case: the exit code (or "killed" when it ran past the cap), the wall time, and
the bytes left behind (in the standby's .standbyc/ beside its weights, in the store, or
next to out/), and whether what was there before is intact.

    python bench/fault_bench.py [--baseline REV] [--cap 60]

Full-disk cases mount small tmpfs file systems (root only; skipped otherwise). Results go
to bench/results/faults-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bench import record  # noqa: E402
from compiler.weights.testing import rl_pair, transformer_specs  # noqa: E402
from tests.faultserver import DATA, FaultServer  # noqa: E402

BASELINE = "a97b590"  # before this round's fault work
SPECS = transformer_specs(layers=2, hidden=384, vocab=6000)


@dataclass
class Run:
    code: str
    seconds: float
    left: int  # bytes left behind
    intact: bool | None
    said: str


class Rev:
    """A standbyc source tree to run."""

    def __init__(self, tree: Path, cap: float) -> None:
        self.tree, self.cap = tree, cap

    def run(self, *args: str, cwd: Path | None = None) -> tuple[str, float, str]:
        # The validators and schemas this checkout built serve both revisions.
        env = {**os.environ, "PYTHONPATH": str(self.tree),
               "STANDBYC_TOOLS_DIR": str(ROOT / ".tools" / "bin"),
               "STANDBYC_SCHEMA_DIR": str(ROOT / ".cache" / "schemas")}  # fmt: skip
        t0 = time.perf_counter()
        try:
            proc = subprocess.run([sys.executable, "-m", "compiler", *args], cwd=cwd or self.tree,
                                  env=env, capture_output=True, text=True, timeout=self.cap,
                                  check=False)  # fmt: skip
        except subprocess.TimeoutExpired:
            return "killed", time.perf_counter() - t0, f"still running after {self.cap:g} s"
        said = (proc.stderr.strip().splitlines() or [""])[-1][:160]
        return str(proc.returncode), time.perf_counter() - t0, said


def size_of(path: Path, skip: tuple[str, ...] = ()) -> int:
    if not path.exists():
        return 0
    return sum(p.stat().st_size for p in path.rglob("*")
               if p.is_file() and p.name not in skip)  # fmt: skip


def tree(path: Path) -> dict[str, bytes]:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted(path.rglob("*"))
            if p.is_file()} if path.exists() else {}  # fmt: skip


@dataclass
class Sync:
    """A store of generations 41 and 42 served by the fault server, a standby at 41."""

    rev: Rev
    work: Path
    gens: dict[int, Path]

    def setup(self, store_edit: Callable[[Path], None] | None = None) -> tuple[FaultServer, Path]:
        store = self.work / "store"
        for g in (41, 42):
            self.rev.run("weights", "publish", str(self.gens[g - 40]), "--to", str(store),
                         "--generation", str(g))  # fmt: skip
        server = FaultServer(store).start()
        target = self.work / "weights" / "cold" / "model"
        self.rev.run("weights", "sync", "--source", server.url, "--generation", "41",
                     "--target", str(target))  # fmt: skip
        if store_edit is not None:
            store_edit(store)
        server.log.clear()
        return server, target

    def case(self, faults: dict[str, str], *flags: str,
             edit: Callable[[Path], None] | None = None) -> Run:  # fmt: skip
        server, target = self.setup(edit)
        before = tree(target)
        server.faults.update(faults)
        server.drip_seconds = 0.5
        try:
            code, secs, said = self.rev.run("weights", "sync", "--source", server.url,
                                            "--generation", "42", "--target", str(target),
                                            *flags)  # fmt: skip
        finally:
            server.stop()
        left = size_of(target.parent / ".standbyc", skip=("lock", "state.json"))
        return Run(code, secs, left, tree(target) == before, said)


def _index_edit(fn: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    def edit(store: Path) -> None:
        index = json.loads((store / "index.json").read_text())
        fn(index)
        (store / "index.json").write_text(json.dumps(index))

    return edit


def _delta_of(index: dict[str, Any]) -> dict[str, Any]:
    delta: dict[str, Any] = index["generations"][-1]["delta"]
    return delta


SYNC_CASES: dict[str, tuple[dict[str, str], tuple[str, ...], Any]] = {
    "416 to every data request": ({DATA: "416"}, (), None),
    "delta declared 1000 bytes larger": (
        {}, (), _index_edit(lambda ix: _delta_of(ix).update(size=_delta_of(ix)["size"] + 1000))),
    "index dripped, a byte per 0.5 s": (
        {"index.json": "drip"}, ("--timeout", "2", "--retries", "2"), None),
    # Rate-limited: the baseline writes an endless body to disk until it is killed.
    "endless body": ({DATA: "endless"}, ("--rate-limit", "200Mbit/s"), None),
    "gzip body unasked": ({DATA: "gzip"}, (), None),
    "listed delta 404": ({}, (), lambda store: (store / "deltas/41-42.delta").unlink()),
    "index chunk_size 0": ({}, (), _index_edit(lambda ix: ix.update(chunk_size=0))),
    "index delta path with newline": (
        {}, (), _index_edit(lambda ix: _delta_of(ix).update(path=_delta_of(ix)["path"] + "\n"))),
    "index digest 000...0": (
        {}, (), _index_edit(lambda ix: ix["generations"][-1].update(digest="0" * 32))),
    "--timeout -1": ({}, ("--timeout", "-1"), None),
    "--timeout nan": ({}, ("--timeout", "nan"), None),
    "--pushgateway http://[host:9091": ({}, ("--pushgateway", "http://[host:9091"), None),
}  # fmt: skip


def tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                          capture_output=True, check=False).returncode == 0  # fmt: skip


def fill(directory: Path, leave: int) -> None:
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    if free > leave:
        (directory / ".filler").write_bytes(b"\0" * (free - leave))


def full_disk_cases(rev: Rev, work: Path, gens: dict[int, Path]) -> dict[str, Run]:
    out: dict[str, Run] = {}
    # compile into a full out/
    disk = work / "compile-disk"
    if not tmpfs(disk, "2m"):
        return out
    try:
        (disk / "out").mkdir()
        fill(disk, 16 << 10)
        code, secs, said = rev.run("compile", str(rev.tree / "specs"), "--out",
                                   str(disk / "out"), "--no-validate")  # fmt: skip
        left = size_of(disk, skip=(".filler",))
        out["compile into a full out/"] = Run(code, secs, left, tree(disk / "out") == {}, said)
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
    # publish into a full store
    store = work / "store-disk"
    tmpfs(store, "40m")
    try:
        rev.run("weights", "publish", str(gens[1]), "--to", str(store), "--generation", "41")
        before = size_of(store)
        index = (store / "index.json").read_bytes()
        fill(store, 1 << 20)
        code, secs, said = rev.run("weights", "publish", str(gens[2]), "--to", str(store),
                                   "--generation", "42")  # fmt: skip
        out["publish into a full store"] = Run(
            code, secs, size_of(store, skip=(".filler",)) - before,
            (store / "index.json").read_bytes() == index, said)  # fmt: skip
    finally:
        subprocess.run(["umount", "-l", str(store)], check=False)
    # sync onto a file system that fills
    sync = Sync(rev, work / "sync-disk", gens)
    weights = work / "sync-disk" / "weights"
    tmpfs(weights, "40m")
    try:
        server, target = sync.setup()
        before = tree(target)
        fill(target.parent, 64 << 10)
        code, secs, said = rev.run("weights", "sync", "--source", server.url, "--generation",
                                   "42", "--target", str(target))  # fmt: skip
        server.stop()
        out["sync onto a disk that fills"] = Run(
            code, secs, size_of(target.parent / ".standbyc", skip=("lock", "state.json")),
            tree(target) == before, said)  # fmt: skip
    finally:
        subprocess.run(["umount", "-l", str(weights)], check=False)
    return out


def other_cases(rev: Rev, work: Path, gens: dict[int, Path]) -> dict[str, Run]:
    out: dict[str, Run] = {}
    work.mkdir(parents=True, exist_ok=True)
    store = work / "store-args"
    for g in ("10000000000000000", "-1"):
        code, secs, said = rev.run("weights", "publish", str(gens[1]), "--to", str(store),
                                   "--generation", g)  # fmt: skip
        idx = store / "index.json"
        out[f"publish --generation {g} on an empty store"] = Run(
            code, secs, size_of(store), not idx.exists(), said
        )
        shutil.rmtree(store, ignore_errors=True)
    for cmd in ("manifest", "diff"):
        args = [str(gens[1])] if cmd == "manifest" else [str(gens[1]), str(gens[2]), "-o",
                                                         str(work / "d.delta")]  # fmt: skip
        code, secs, said = rev.run("weights", cmd, *args, "--chunk-size", "0")
        out[f"{cmd} --chunk-size 0"] = Run(code, secs, size_of(work / "d.delta"), None, said)
    loop = work / "loop"
    loop.mkdir()
    (loop / "a.yaml").symlink_to(loop / "b.yaml")
    (loop / "b.yaml").symlink_to(loop / "a.yaml")
    for cmd in ("compile", "plan"):
        extra = ["--no-validate", "--out", str(work / "loop-out")] if cmd == "compile" else []
        code, secs, said = rev.run(cmd, str(loop / "a.yaml"), *extra)
        out[f"{cmd} of a spec that is a symlink loop"] = Run(code, secs, 0, None, said)
    for name, body in (("evaluationInterval: 1ms", "evaluationInterval: 1ms"),
                       ("bandwidthHigh for: 1000h", "bandwidthHigh: {for: 1000h}")):  # fmt: skip
        spec = work / f"spec-{len(out)}.yaml"
        head = "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\n"
        spec.write_text(
            f"{head}metadata: {{name: x, namespace: y}}\nspec:\n  alerts:\n    {body}\n"
        )
        code, secs, said = rev.run("compile", str(spec), "--out", str(work / f"o{len(out)}"),
                                   "--no-validate")  # fmt: skip
        out[f"compile with {name}"] = Run(code, secs, 0, None, said)
    outdir = work / "fifo-out"
    shutil.copytree(rev.tree / "out", outdir)
    os.mkfifo(outdir / "extra.yaml")
    (outdir / "zero.yaml").symlink_to("/dev/zero")
    code, secs, said = rev.run("validate", str(outdir))
    out["validate with a FIFO and a link to /dev/zero"] = Run(code, secs, 0, None, said)
    return out


def make_generations(work: Path) -> dict[int, Path]:
    """Generations 1 and 2 of the bench's model, one RL step apart."""
    gens = {}
    for g in (1, 2):
        gens[g] = work / f"g{g}" / "model.safetensors"
        gens[g].parent.mkdir()
        rl_pair(work / "g0.safetensors", gens[g], SPECS, steps=g, lr=2e-6)
    return gens


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", default=BASELINE)
    p.add_argument("--cap", type=float, default=60.0, help="seconds before a run is killed")
    args = p.parse_args()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="standbyc-faults-") as tmp:
        work = Path(tmp)
        base = work / "baseline"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", str(base),
                        args.baseline], check=True, capture_output=True)  # fmt: skip
        try:
            gens = make_generations(work)
            for label, tree_ in (("before", base), ("after", ROOT)):
                rev = Rev(tree_, args.cap)
                for name, (faults, flags, edit) in SYNC_CASES.items():
                    d = work / label / name.replace(" ", "_").replace("/", "_")
                    d.mkdir(parents=True)
                    results.setdefault(name, {})[label] = Sync(rev, d, gens).case(
                        faults, *flags, edit=edit).__dict__  # fmt: skip
                runs = full_disk_cases(rev, work / label / "disk", gens)
                runs |= other_cases(rev, work / label / "other", gens)
                for name, run in runs.items():
                    results.setdefault(name, {})[label] = run.__dict__
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(base)],
                           check=False, capture_output=True)  # fmt: skip
    print_table(results, f"before ({args.baseline}): exit, time, bytes left",
                lambda r: f"{r['code']}, {r['seconds']:.1f} s, {r['left']} B")  # fmt: skip
    record.save("faults", results)


def print_table(
    results: dict[str, dict[str, Any]], before: str, cell: Callable[[dict[str, Any]], str]
) -> None:
    """A Markdown table: a row per case, its run before and after, and whether what was
    there before is intact."""
    print(f"\n| case | {before} | after |")
    print("|---|---|---|")
    for name, runs in results.items():
        cells = []
        for label in ("before", "after"):
            r = runs.get(label)
            if r is None:
                cells.append("-")
                continue
            intact = "" if r["intact"] is None else (", intact" if r["intact"] else ", CHANGED")
            cells.append(cell(r) + intact)
        print(f"| {name} | {cells[0]} | {cells[1]} |")


if __name__ == "__main__":
    main()
