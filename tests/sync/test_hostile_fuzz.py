"""Random faults on every file of a sync: whatever the server does, the sync ends within
its budget with a documented exit code, leaves the old weights or the new ones (never a
mix), and nothing beyond the sizes the index declares. `make fuzz` runs many more."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.faultserver import FaultServer
from tests.sync.conftest import (
    TARGET,
    TIER,
    job_command,
    leftovers,
    publish,
    run_sync,
    tree_bytes,
    with_arg,
    with_flag,
)

FAULTS = [None, "416", "drip", "endless", "reset", "wrong-range", "gzip", "long"]
EXAMPLES = 200 if os.environ.get("HYPOTHESIS_PROFILE") == "fuzz" else 6
BUDGET = 8  # seconds: --deadline


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip
@given(faults=st.lists(st.sampled_from(FAULTS), min_size=3, max_size=3))
def test_random_faults_end_in_a_documented_way(
    faults: list[str | None], generations: dict[int, Path], compiled: Path,
    tmp_path_factory: Any,
) -> None:  # fmt: skip
    work = tmp_path_factory.mktemp("fuzz")
    store = work / "store"
    publish(generations[1], store, 41)
    publish(generations[2], store, 42)
    server = FaultServer(store, drip_seconds=0.01).start()
    try:
        weights = work / "weights"
        cmd = job_command(compiled, TIER, source=server.url, weights=weights)
        code, _, err, _ = run_sync(with_arg(cmd, "--generation", "41"))
        assert code == 0, err
        old = tree_bytes(weights / TARGET)
        for path, fault in zip(("index.json", "deltas/41-42.delta", "anchors/42/model.safetensors"),
                               faults, strict=True):  # fmt: skip
            if fault is not None:
                server.faults[path] = fault
        quick = with_flag(with_flag(with_flag(cmd, "--timeout", "2"), "--retries", "2"),
                          "--deadline", str(BUDGET))  # fmt: skip
        code, _, err, took = run_sync(quick, timeout=120)
    finally:
        server.stop()
    assert code in (0, 1, 2, 4), err
    assert "Traceback" not in err
    assert took < BUDGET + 20, took
    held = tree_bytes(weights / TARGET)
    assert held in (old, {"model.safetensors": generations[2].read_bytes()})
    assert (held != old) == (code == 0)
    declared = {f.name: f.stat().st_size for f in (store / "deltas").iterdir()}
    declared |= {f.name: f.stat().st_size for f in (store / "anchors").rglob("*") if f.is_file()}
    cap = max(declared.values())
    assert all(size <= cap for size in leftovers(weights).values()), leftovers(weights)
