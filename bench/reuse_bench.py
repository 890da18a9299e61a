"""What reuse buys, and what sound reuse costs: cold compiles of many specs with reuse on
and with ``STANDBYC_REUSE=off``, this revision beside an earlier one, in one run.

    python bench/reuse_bench.py                      # against the revision before reuse moved
    python bench/reuse_bench.py --baseline <rev> --count 200 --runs 3

Two families of specs, both from the seed:
- "names": specs that differ only in name and namespace (and the generation, which every
  test reads from a record): what specs stamped from one template look like;
- "numbers": specs that also differ in replicas, bandwidths, thresholds, windows and the
  generation, as real teams' specs do: sharing between specs helps less there.

Scenarios per revision and family: "cold" (a fresh out/ and an empty cache), "plain" (reuse
off: every validator on every input; at a revision without the switch, the cache off), and
"unchanged" (the same specs again with the cache the cold run left). Medians of ``--runs``,
in seconds; "plain" runs once unless ``--plain-runs`` says more (it takes minutes). Each
revision runs in its own process from its own worktree, with the same validators and
schemas. Results also go to bench/results/reuse.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench import record  # noqa: E402

BASELINE = "bf0c1ca"  # the last revision before reuse moved behind one seam and switch
SEED = (ROOT / "specs" / "inference-engine.yaml").read_text()


def names(i: int) -> str:
    return (
        SEED.replace("name: inference-engine", f"name: engine-{i:03d}")
        .replace("namespace: inference-system", f"namespace: team-{i % 20:02d}")
        .replace("generation: 42", f"generation: {i + 1}")
    )


def numbers(i: int) -> str:
    """The seed with its numbers moved: link, replicas, egress, thresholds, windows, `for`s,
    generation."""
    text = names(i).replace("replicas: 3", f"replicas: {2 + i % 3}")
    for old, new in [
        ("link: 100Gbit/s", f"link: {150 + 10 * (i % 6)}Gbit/s"),
        ("egress: 25Gbit/s", f"egress: {20 + i % 9}Gbit/s"),
        ("egress: 10Gbit/s", f"egress: {8 + i % 5}Gbit/s"),
        ("egress: 5Gbit/s", f"egress: {2 + i % 4}Gbit/s"),
        ("threshold: 10Gbit/s", f"threshold: {6 + i % 11}Gbit/s"),
        ("window: 5m", f"window: {3 + i % 7}m"),
        ("for: 5m", f"for: {2 + i % 6}m"),
        ("threshold: 50Gbit/s", f"threshold: {40 + i % 13}Gbit/s"),
    ]:
        assert old in text, old
        text = text.replace(old, new, 1)
    return text


FAMILIES = {"names": names, "numbers": numbers}
# Both revisions use this checkout's validators and schemas (a worktree has neither).
SAME = {
    "STANDBYC_TOOLS_DIR": str(ROOT / ".tools" / "bin"),
    "STANDBYC_SCHEMA_DIR": str(ROOT / ".cache" / "schemas"),
}

# Runs inside the revision's own tree (its compiler on PYTHONPATH).
RUNNER = """
import json, os, shutil, sys, time
from pathlib import Path
from compiler.api import compile_tree
specs = sorted(Path(sys.argv[1]).glob("*.yaml"))
out = Path(sys.argv[2])
t0 = time.perf_counter()
result = compile_tree(specs, out)
wall = time.perf_counter() - t0
if not result.ok:
    sys.exit(result.report.summary_text() if result.report else str(result.diagnostics))
print(json.dumps({"total_s": wall, "reused": result.report.reused if result.report else 0}))
"""


def run(tree: Path, specs: Path, out: Path, env: dict[str, str]) -> dict[str, float]:
    proc = subprocess.run(
        [sys.executable, "-c", RUNNER, str(specs), str(out)],
        cwd=tree,
        env={**os.environ, **SAME, **env, "PYTHONPATH": str(tree)},
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        raise SystemExit(f"{tree}: compile failed:\n{proc.stdout}{proc.stderr}")
    data: dict[str, float] = json.loads(proc.stdout.strip().splitlines()[-1])
    return data


def median(samples: list[dict[str, float]]) -> dict[str, float]:
    return {k: round(statistics.median(s[k] for s in samples), 2) for k in samples[0]}


def has_switch(tree: Path) -> bool:
    return (tree / "compiler" / "reuse" / "switch.py").is_file()


def scenarios(
    tree: Path, specs: Path, base: Path, runs: int, plain_runs: int
) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    cold = []
    for i in range(runs):
        cache = base / f"cache-{i}"
        cold.append(run(tree, specs, base / f"out-{i}", {"STANDBYC_CACHE_DIR": str(cache)}))
        if i < runs - 1:
            shutil.rmtree(base / f"out-{i}")
            shutil.rmtree(cache)
    out["cold"] = median(cold)
    last = runs - 1
    env = {"STANDBYC_CACHE_DIR": str(base / f"cache-{last}")}
    out["unchanged"] = median([run(tree, specs, base / f"out-{last}", env) for _ in range(runs)])
    off = {"STANDBYC_REUSE": "off"} if has_switch(tree) else {"STANDBYC_CACHE": "off"}
    plain = []
    for i in range(plain_runs):
        plain.append(run(tree, specs, base / f"out-plain-{i}", off))
        shutil.rmtree(base / f"out-plain-{i}")
    out["plain" if has_switch(tree) else "plain (cache off; sharing has no switch)"] = median(plain)
    return out


def _children_cpu() -> float:
    """CPU seconds of the finished child processes, their own children (the tools) in."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def one_spec(trees: dict[str, Path], base: Path, runs: int) -> dict[str, dict[str, float]]:
    """The seed spec alone, cold (a fresh out/ and an empty cache), reuse on and off, per
    revision: wall and CPU seconds (standbyc and its tools), medians of ``runs``, the
    configurations interleaved so a busy machine weighs on all alike."""
    specs = base / "one"
    specs.mkdir()
    (specs / "inference-engine.yaml").write_text(SEED)
    samples: dict[str, list[dict[str, float]]] = {}
    for i in range(runs):
        for label, tree in trees.items():
            for mode in ("on", "off"):
                env = {"STANDBYC_CACHE_DIR": str(base / f"cache-{label}-{mode}-{i}")}
                if mode == "off":
                    env["STANDBYC_REUSE" if has_switch(tree) else "STANDBYC_CACHE"] = "off"
                cpu = _children_cpu()
                row = run(tree, specs, base / f"out-{label}-{mode}-{i}", env)
                row["cpu_s"] = _children_cpu() - cpu
                samples.setdefault(f"1 spec cold: reuse {mode}: {label}", []).append(row)
    return {name: median(rows) for name, rows in samples.items()}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--baseline", default=BASELINE)
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--plain-runs", type=int, default=1)
    parser.add_argument(
        "--one", action="store_true", help="only the seed spec alone, cold, reuse on and off"
    )
    args = parser.parse_args()
    if args.one:
        return _one(args)
    results: dict[str, dict[str, float]] = {}
    with _baseline(args.baseline) as (base, before):
        for family, make in FAMILIES.items():
            specs = base / f"specs-{family}"
            specs.mkdir()
            for i in range(args.count):
                (specs / f"engine-{i:03d}.yaml").write_text(make(i))
            for label, tree in (("before", before), ("now", ROOT)):
                work = base / f"work-{family}-{label}"
                work.mkdir()
                rows = scenarios(tree, specs, work, args.runs, args.plain_runs)
                for scenario, row in rows.items():
                    results[f"{args.count} {family}: {scenario}: {label}"] = row
                shutil.rmtree(work)
    print(f"{'scenario':58}{'total_s':>10}{'reused':>10}")
    for name, row in results.items():
        print(f"{name:58}{row['total_s']:>10g}{row['reused']:>10g}")
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    (out / "reuse.json").write_text(json.dumps(results, indent=2) + "\n")
    return 0


@contextlib.contextmanager
def _baseline(revision: str) -> Iterator[tuple[Path, Path]]:
    """A scratch directory, and the baseline revision checked out in it (removed after)."""
    with tempfile.TemporaryDirectory() as tmp:
        base = Path(tmp)
        before = base / "baseline"
        subprocess.run(
            ["git", "-C", str(ROOT), "worktree", "add", "--detach", str(before), revision],
            check=True,
            capture_output=True,
        )
        try:
            yield base, before
        finally:
            subprocess.run(
                ["git", "-C", str(ROOT), "worktree", "remove", "--force", str(before)],
                check=False,
                capture_output=True,
            )


def _one(args: argparse.Namespace) -> int:
    with _baseline(args.baseline) as (base, before):
        results = one_spec({"before": before, "now": ROOT}, base, args.runs)
    print(f"{'scenario':40}{'total_s':>10}{'cpu_s':>10}")
    for name, row in results.items():
        print(f"{name:40}{row['total_s']:>10g}{row['cpu_s']:>10g}")
    record.save("reuse-one", {"baseline": args.baseline, "runs": args.runs, **results})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
