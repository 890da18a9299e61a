"""What an attacker of a standby's claim and a newcomer to publishing run into: each case
run by this revision and by a baseline revision, side by side.

Sync cases (a standby at 41 syncing 42 from a fault-free store, run as by hand): a damaged
or planted state directory, a read-only claim, a dead store; publish cases: a directory
that changes while it is published. For each: the exit code (or "killed" past the cap),
the wall time, the first second anything was said on stderr, the peak resident memory,
and whether what was there before (the model directory, a planted link's target, the
store) is intact.

    python bench/attack_bench.py [--baseline REV] [--cap 120]

The read-only claim mounts a tmpfs (root only; skipped otherwise). Results go to
bench/results/attack-<time>.json.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
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
from bench.fault_bench import make_generations, print_table, tmpfs, tree  # noqa: E402
from tests.faultserver import FaultServer  # noqa: E402

BASELINE = "204db08"  # before the state directory, publish and dead-store work
# standbyc, then its own peak RSS (VmHWM, reset by exec) on stderr: a child's ru_maxrss
# would count the pages of this process, inherited across fork (bench/rss_child.py).
PEAK = (
    "import sys\nfrom compiler.cli import main\ncode = main(sys.argv[1:])\n"
    "hwm = [l for l in open('/proc/self/status') if l.startswith('VmHWM:')]\n"
    "print('VmHWM', hwm[0].split()[1], file=sys.stderr)\nraise SystemExit(code)"
)


@dataclass
class Run:
    code: str
    seconds: float
    first_said: float | None  # seconds until the first line on stderr
    rss_mib: float | None  # None: killed before it could say
    intact: bool | None
    said: str


class Rev:
    """A standbyc source tree, run as ``python -m compiler`` with its own PYTHONPATH."""

    def __init__(self, tree_: Path, cap: float) -> None:
        self.tree, self.cap = tree_, cap

    def popen(self, *args: str) -> subprocess.Popen[bytes]:
        env = {**os.environ, "PYTHONPATH": str(self.tree)}
        return subprocess.Popen([sys.executable, "-c", PEAK, *args], cwd=self.tree, env=env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)  # fmt: skip

    def run(self, *args: str, during: Callable[[subprocess.Popen[bytes]], None] | None = None,
            intact: Callable[[], bool] | None = None) -> Run:  # fmt: skip
        t0 = time.perf_counter()
        proc = self.popen(*args)
        if during is not None:
            during(proc)
        first, lines, status = _watch(proc, t0, self.cap)
        secs = time.perf_counter() - t0
        code = "killed" if secs >= self.cap else str(os.waitstatus_to_exitcode(status))
        peak = [int(line.split()[1]) / 1024 for line in lines if line.startswith("VmHWM ")]
        said = [line for line in lines if not line.startswith("VmHWM ")]
        if first is not None and not said:
            first = None  # only the peak was said
        return Run(code, secs, first, peak[0] if peak else None,
                   intact() if intact else None, (said[-1] if said else "")[:160])  # fmt: skip


def _watch(
    proc: subprocess.Popen[bytes], t0: float, cap: float
) -> tuple[float | None, list[str], int]:
    """Read stderr until the process ends (killed at ``cap``): when its first line came,
    every line, and its wait status."""
    assert proc.stderr is not None
    os.set_blocking(proc.stderr.fileno(), False)
    first: float | None = None
    data = b""
    while True:
        chunk = proc.stderr.read() or b""
        if chunk and first is None:
            first = time.perf_counter() - t0
        data += chunk
        pid, status = os.waitpid(proc.pid, os.WNOHANG)
        if pid:
            data += proc.stderr.read() or b""
            proc.returncode = os.waitstatus_to_exitcode(status)  # reaped here, not by Popen
            return first, data.decode(errors="replace").splitlines(), status
        if time.perf_counter() - t0 > cap:
            proc.kill()
        time.sleep(0.01)


class Standby:
    """A store of 41 and 42 served on loopback; a standby at 41 under ``weights``."""

    def __init__(self, rev: Rev, work: Path, gens: dict[int, Path], weights: Path) -> None:
        self.rev, self.work = rev, work
        self.store = work / "store"
        for g in (41, 42):
            rev.run("weights", "publish", str(gens[g - 40]), "--to", str(self.store),
                    "--generation", str(g))  # fmt: skip
        self.server = FaultServer(self.store).start()
        self.target = weights / "cold" / "model"
        self.state = weights / "cold" / ".standbyc" / "model"
        rev.run(*self.sync("41"))

    def sync(self, generation: str = "42", source: str | None = None) -> list[str]:
        return ["weights", "sync", "--source", source or self.server.url, "--generation",
                generation, "--target", str(self.target), "--format", "json"]  # fmt: skip

    def case(self, *extra: str, source: str | None = None,
             also: Path | None = None) -> Run:  # fmt: skip
        def now() -> tuple[dict[str, bytes], dict[str, bytes] | None]:
            return tree(self.target), tree(also) if also else None

        before = now()
        try:
            return self.rev.run(*self.sync(source=source), *extra,
                                intact=lambda: now() == before)  # fmt: skip
        finally:
            self.server.stop()


def _victim(work: Path) -> Path:
    victim = work / "elsewhere"
    victim.mkdir(exist_ok=True)
    (victim / "victim.txt").write_text("not the sync's to write")
    return victim


def _plant(state: Path, name: str, target: Path) -> None:
    path = state / name
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    path.symlink_to(target)


def _state_json(state: Path, make: Callable[[Path], None]) -> None:
    path = state / "state.json"
    path.unlink()
    make(path)


def sync_cases(rev: Rev, work: Path, gens: dict[int, Path]) -> dict[str, Run]:
    out: dict[str, Run] = {}

    def standby(name: str) -> Standby:
        d = work / name.replace(" ", "_").replace("/", "_")
        d.mkdir(parents=True)
        return Standby(rev, d, gens, d / "weights")

    s = standby("fifo")
    _state_json(s.state, os.mkfifo)
    out["state.json is a FIFO"] = s.case()
    s = standby("dir")
    _state_json(s.state, lambda p: p.mkdir())
    out["state.json is a directory"] = s.case()
    s = standby("huge")
    _state_json(s.state, lambda p: p.open("wb").truncate(400 << 20))
    out["state.json of 400 MB (sparse)"] = s.case()
    for name in ("state.json.tmp", "downloads/deltas__41-42.delta.part.json.tmp"):
        s = standby(f"link {name}")
        victim = _victim(s.work)
        _plant(s.state, name, victim / "victim.txt")
        out[f"{name} links elsewhere"] = s.case(also=victim)
    s = standby("work")
    victim = _victim(s.work)
    _plant(s.state, "work", victim)
    out["work links elsewhere"] = s.case(also=victim)
    s = standby("dead")
    s.server.stop()
    out["dead store, by hand"] = s.case(source="http://127.0.0.1:9/")
    return out


def report_case(rev: Rev, work: Path, gens: dict[int, Path]) -> dict[str, Run]:
    d = work / "report"
    d.mkdir(parents=True)
    s = Standby(rev, d, gens, d / "weights")
    s.server.stop()
    path = s.state / "state.json"
    doc = json.loads(path.read_text())
    doc["generation"] = 10**400
    path.write_text(json.dumps(doc))
    run = rev.run("weights", "report", "--pushgateway", "http://127.0.0.1:9/", "--tier",
                  "cold", str(s.target), "--format", "json")  # fmt: skip
    return {"weights report, generation 10**400 in state.json": run}


def read_only_case(rev: Rev, work: Path, gens: dict[int, Path]) -> dict[str, Run]:
    d = work / "ro"
    weights = d / "weights"
    if not tmpfs(weights, "40m"):
        return {}
    try:
        s = Standby(rev, d, gens, weights)
        subprocess.run(["mount", "-o", "remount,ro", str(weights)], check=True)
        return {"read-only claim": s.case()}
    finally:
        subprocess.run(["umount", "-l", str(weights)], check=False)


def publish_case(rev: Rev, work: Path, gens: dict[int, Path]) -> dict[str, Run]:
    """The weights rewritten in place while the publish runs (stopped once it began)."""
    d = work / "publish"
    model = d / "model"
    model.mkdir(parents=True)
    shutil.copyfile(gens[2], model / "model.safetensors")
    (model / "tokenizer.bin").write_bytes(os.urandom(1 << 20) * 64)
    store = d / "store"
    rev.run("weights", "publish", str(gens[1]), "--to", str(store), "--generation", "41")
    before = tree(store)

    def rewrite(proc: subprocess.Popen[bytes]) -> None:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:  # not poll(): _watch reaps it
            if any(".standbyc-tmp-" in p.name for p in store.rglob("*")):
                os.kill(proc.pid, signal.SIGSTOP)
                with (model / "model.safetensors").open("r+b") as f:
                    f.seek(-4096, os.SEEK_END)
                    f.write(b"\x01" * 4096)
                os.kill(proc.pid, signal.SIGCONT)
                return

    run = rev.run("weights", "publish", str(model), "--to", str(store), "--generation", "42",
                  during=rewrite, intact=lambda: tree(store) == before)  # fmt: skip
    return {"publish, weights rewritten mid-run": run}


def publish_time_case(rev: Rev, work: Path, gens: dict[int, Path]) -> dict[str, Run]:
    """The cost of reading the weights once: publishing 42 over 41, median of 5."""
    runs = []
    for i in range(5):
        store = work / f"still-{i}"
        rev.run("weights", "publish", str(gens[1]), "--to", str(store), "--generation", "41")
        runs.append(rev.run("weights", "publish", str(gens[2]), "--to", str(store),
                            "--generation", "42"))  # fmt: skip
    runs.sort(key=lambda r: r.seconds)
    return {"publish of a still directory, median of 5": runs[2]}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--baseline", default=BASELINE)
    p.add_argument("--cap", type=float, default=120.0, help="seconds before a run is killed")
    args = p.parse_args()
    results: dict[str, dict[str, Any]] = {}
    with tempfile.TemporaryDirectory(prefix="standbyc-attack-") as tmp:
        work = Path(tmp)
        base = work / "baseline"
        base.mkdir()
        archive = subprocess.run(["git", "-C", str(ROOT), "archive", args.baseline],
                                 check=True, capture_output=True).stdout  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(base)], input=archive, check=True)
        gens = make_generations(work)
        for label, tree_ in (("before", base), ("after", ROOT)):
            rev = Rev(tree_, args.cap)
            runs = sync_cases(rev, work / label / "sync", gens)
            runs |= report_case(rev, work / label, gens)
            runs |= read_only_case(rev, work / label, gens)
            runs |= publish_case(rev, work / label, gens)
            runs |= publish_time_case(rev, work / label, gens)
            for name, run in runs.items():
                results.setdefault(name, {})[label] = run.__dict__
    print_table(results, f"before ({args.baseline})", _cell)
    record.save("attack", results)


def _cell(r: dict[str, Any]) -> str:
    first = "" if r["first_said"] is None else f", first word at {r['first_said']:.1f} s"
    rss = "" if r["rss_mib"] is None else f", peak {r['rss_mib']:.0f} MiB"
    return f"exit {r['code']}, {r['seconds']:.1f} s{first}{rss}"


if __name__ == "__main__":
    main()
