"""Merged deltas end to end: nginx serves the store, the compiled Job's command pulls the
one merged delta a lagging standby needs, and refuses a damaged one."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from tests.sync.conftest import Nginx, job_command, publish, sha256, tree_bytes, with_arg
from tests.sync.test_sync import _fetched, _model, _sync


def _behind(nginx: Nginx, generations: dict[int, Path], compiled: Path, weights: Path) -> list[str]:
    """A standby synced to 39, then 40, 41 and 42 published: the Job's command for it."""
    publish(generations[1], nginx.root, 39)
    cmd = job_command(compiled, "warm", source=nginx.url, weights=weights)
    assert _sync(with_arg(cmd, "--generation", "39"))[0] == 0
    for g in (40, 41, 42):
        publish(generations[g - 38], nginx.root, g)
    return cmd


def test_a_standby_behind_fetches_one_merged_delta(
    nginx: Nginx, generations: dict[int, Path], compiled: Path, tmp_path: Path
) -> None:
    weights = tmp_path / "weights"
    cmd = _behind(nginx, generations, compiled, weights)
    index = json.loads((nginx.root / "index.json").read_bytes())
    steps = sum(g["delta"]["size"] for g in index["generations"] if g["generation"] > 39)
    nginx.clear_log()
    code, doc, err = _sync(cmd)
    assert code == 0, err
    assert str(doc["route"]).startswith("chain of 1 delta(s) 39 -> 42 (merged 39-42): ")
    assert _fetched(nginx) == ["/index.json", "/deltas/39-42.delta"]
    assert sha256(_model(weights, "warm")) == sha256(generations[4])
    merged = (nginx.root / "deltas/39-42.delta").stat().st_size
    assert int(doc["bytes_fetched"]) == merged + (nginx.root / "index.json").stat().st_size
    assert merged < steps


@pytest.mark.parametrize("index_too", [False, True], ids=["bytes", "bytes-and-index"])
def test_a_corrupted_merged_delta_keeps_the_old_weights(
    nginx: Nginx, generations: dict[int, Path], compiled: Path, tmp_path: Path, index_too: bool
) -> None:
    weights = tmp_path / "weights"
    cmd = _behind(nginx, generations, compiled, weights)
    before = tree_bytes(weights / "warm/llama-7b")
    delta = nginx.root / "deltas/39-42.delta"
    data = bytearray(delta.read_bytes())
    good = hashlib.sha256(data).hexdigest()
    data[-len(data) // 3] ^= 0xFF
    delta.write_bytes(bytes(data))
    if index_too:  # a store that lists the damaged file as it is: apply must refuse it
        path = nginx.root / "index.json"
        path.write_text(path.read_text().replace(good, hashlib.sha256(data).hexdigest()))
    code, doc, err = _sync(cmd)
    assert code == 1, err
    if index_too:
        assert "deltas__39-42.delta: payload checksum mismatch" in str(doc["error"])
    else:
        assert "deltas/39-42.delta: got" in str(doc["error"]) and "sha256" in str(doc["error"])
    assert doc["held_generation"] == 39
    assert tree_bytes(weights / "warm/llama-7b") == before
    assert not list((weights / "warm").glob("*standbyc-tmp*"))
