"""The plan's rollout steps against a real sync: a multi-GiB model directory (3 bf16 shards
with their index, 2% of elements changed between generations) published into a store served
by nginx, then the compiled weight-sync Job's own command run twice, as a new standby and as
one a generation behind. Its download and its rebuild (``seconds_download`` and
``seconds_apply`` in its output) must each be within a factor of FACTOR of what PLAN.md says
for the same spec, in both directions (the rebuild: up to CACHE_FACTOR faster, below): the
plan neither hides a cost nor invents one.

The spec reads the claim as a local disk would (``claimReadRate`` far above the rebuild's own
rate), so the rebuild's measured constant (compiler/failover/calibration.py) is what is held."""

from __future__ import annotations

import json
import os
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from compiler.api import compile_tree
from compiler.failover import Step
from compiler.failover.rollout import full_copy_steps
from tests.servers import Nginx
from tests.sync import bigmodel
from tests.sync.conftest import job_command, publish, with_arg

GIB = 2.0  # the model's size: multi-GiB, and a test of under a minute on 2 cores
FACTOR = 3.0
RATE = "2Gbit/s"  # the tier's egress: its Job syncs at half of it
FAST_BPS = 40 * 10**9  # a new standby's limit: well above what one sync receives


def _spec(path: Path, size: int, delta: float, store: str) -> Path:
    path.write_text(
        "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\n"
        "metadata: {name: calibrated, namespace: ml}\nspec:\n"
        f"  tiers:\n    hot: {{replicas: 1, egress: {RATE}}}\n"
        f"  model: {{name: big, size: {size}B, path: /models/big}}\n"
        f"  weightSync:\n    tiers: [hot]\n    store: {{url: '{store}'}}\n"
        f"    expectedDelta: {delta * 100:.3f}%\n    claimReadRate: 100GB/s\n"
    )
    return path


def _steps(steps: tuple[Step, ...]) -> dict[str, float]:
    """Each step's own seconds (a step's ``at`` is when it is done)."""
    out, before = {}, 0.0
    for s in steps:
        out[s.name] = s.at - before
        before = s.at
    return out


def _run(cmd: list[str]) -> dict[str, object]:
    # The GiBs this test just wrote (the model, the store) are flushed first: their
    # writeback would otherwise load the disk while the sync is timed.
    os.sync()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, object] = json.loads(proc.stdout)
    return doc


# The rebuild's constant is a full page cache's (a node that serves keeps its model
# cached), the slow state: with memory free the same rebuild ran 3.2x faster in a CI run
# (2.54 s against 8.20 s planned), 1.04x in another (7.88 s). Below it, the plan may be
# pessimistic by this much, never more; above it, it may hide no more than FACTOR.
CACHE_FACTOR = 4.0


def _within(measured: float, planned: float, what: str, faster: float = FACTOR) -> None:
    print(f"{what}: measured {measured:.2f} s, planned {planned:.2f} s")  # shown with -s
    assert planned / faster <= measured <= planned * FACTOR, (
        f"{what}: measured {measured:.2f} s, the plan says {planned:.2f} s "
        f"(allowed: {faster:g} times faster, {FACTOR:g} times slower)"
    )


def test_a_real_multi_gib_sync_takes_what_the_plan_says(tmp_path: Path, nginx: Nginx) -> None:
    gens = bigmodel.pair(tmp_path / "model", GIB)
    size = bigmodel.size(gens[2])
    assert size > 2**30  # multi-GiB: what users run, not a toy
    store = nginx.root / "store"
    publish(gens[1], store, 1)
    published = publish(gens[2], store, 2)
    # The plan's download is the expected delta at the rate: give it the delta published.
    delta = published["delta_bytes"] / size
    assert 0 < delta < 0.1
    spec = _spec(tmp_path / "calibrated.yaml", size, delta, f"{nginx.url}store/")
    out = tmp_path / "out"
    result = compile_tree([spec], out, validate=False)
    assert result.ok, result.diagnostics
    plan = result.specs[0].plan
    (rollout,) = plan.failover.rollouts
    planned = _steps(rollout.steps)
    # A new standby fetches the whole model: at a limit its network never reaches, the
    # plan's download is what the sync writes and hashes per second.
    i = plan.failover_inputs
    fast = replace(i, rollout=replace(i.rollout, tiers=tuple(
        replace(t, sync_rate_bps=FAST_BPS) for t in i.rollout.tiers)))  # fmt: skip
    new = _steps(tuple(full_copy_steps(fast, "hot")))

    weights = tmp_path / "weights"
    cmd = job_command(out, "hot", source=f"{nginx.url}store/", weights=weights,
                      spec_dir="ml/calibrated")  # fmt: skip
    fast_cmd = with_arg(cmd, "--rate-limit", f"{FAST_BPS // 10**9}Gbit/s")
    first = _run([*with_arg(fast_cmd, "--generation", "1"), "--format", "json"])
    assert first["status"] == "updated"
    second = _run([*with_arg(cmd, "--generation", "2"), "--format", "json"])
    assert second["status"] == "updated" and second["previous_generation"] == 1

    _within(float(second["seconds_download"]), planned["download"], "the delta's download")  # type: ignore[arg-type]
    _within(float(second["seconds_apply"]), planned["rebuild"], "the rebuild", CACHE_FACTOR)  # type: ignore[arg-type]
    _within(float(first["seconds_download"]), new["download"], "a new standby's download")  # type: ignore[arg-type]


@pytest.mark.parametrize("gib", [GIB])
def test_the_model_is_what_the_spec_says(tmp_path: Path, gib: float) -> None:
    """The generator writes the size it is asked for, in shards with their index."""
    gens = bigmodel.pair(tmp_path, gib / 8)
    files = sorted(p.name for p in gens[1].iterdir())
    assert files == [
        "config.json", "model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
        "model-00003-of-00003.safetensors", "model.safetensors.index.json",
    ]  # fmt: skip
    index = json.loads((gens[2] / "model.safetensors.index.json").read_text())
    assert abs(index["metadata"]["total_size"] - gib / 8 * 2**30) <= 3 * bigmodel.TENSOR
