"""A sync whose claim or state directory someone else damaged, or planted links in.

Each case runs the compiled cold Job's command and asserts the exit code, a bound on the
wall time, and that nothing changed: the model directory byte for byte, the state
directory entry for entry, and whatever a planted link points to.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compiler.weights.sync.index import dir_digest
from compiler.weights.sync.modeldir import MAX_FILES
from compiler.weights.sync.standby import StandbyDir
from tests.conftest import REPO
from tests.faultserver import FaultServer
from tests.servers import Pushgateway
from tests.sync.conftest import (
    STANDBYC,
    TARGET,
    TIER,
    held,
    job_command,
    leftovers,
    report_command,
    run_sync,
    tree_state,
    with_arg,
)

Standby = tuple[list[str], Path]


def _state(weights: Path) -> Path:
    return StandbyDir(weights / TARGET).state


def _refused(cmd: list[str], weights: Path, *also: Path) -> tuple[dict[str, Any], str]:
    """Run the sync; assert exit 2 within 20 s and nothing changed under ``weights`` or
    ``also``; return its document and stderr."""
    before = [tree_state(weights), *(tree_state(p) for p in also)]
    code, doc, err, took = run_sync(cmd)
    assert code == 2, err
    assert "Traceback" not in err
    assert took < 20
    assert [tree_state(weights), *(tree_state(p) for p in also)] == before
    return doc, err


# --- a claim that cannot be written ------------------------------------------------------


def _remount(path: Path, how: str) -> None:
    proc = subprocess.run(["mount", "-o", f"remount,{how}", str(path)], capture_output=True,
                          text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_a_claim_remounted_read_only(
    served: FaultServer, compiled: Path, tmp_path: Path, tmpfs: Any
) -> None:
    weights = tmpfs(tmp_path / "claim", "40m")
    cmd = job_command(compiled, TIER, source=served.url, weights=weights)
    code, _, err, _ = run_sync(with_arg(cmd, "--generation", "41"))
    assert code == 0, err
    _remount(weights, "ro")  # what the kernel does to a file system after errors
    try:
        doc, err = _refused(cmd, weights)
    finally:
        _remount(weights, "rw")
    assert "read-only file system" in doc["error"], doc["error"]
    assert "remounted read-only after errors" in doc["error"]
    assert doc["held_generation"] == 41  # still reported: the old directory is intact


def test_an_empty_claim_mounted_read_only(
    served: FaultServer, compiled: Path, tmp_path: Path, tmpfs: Any
) -> None:
    weights = tmpfs(tmp_path / "claim", "40m")
    _remount(weights, "ro")
    try:
        cmd = job_command(compiled, TIER, source=served.url, weights=weights)
        doc, _ = _refused(cmd, weights)
    finally:
        _remount(weights, "rw")
    assert doc["error"].startswith(f"{weights / TIER}: read-only file system"), doc["error"]


# --- links planted in the state directory --------------------------------------------------


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "elsewhere" / "victim.txt"
    victim.parent.mkdir()
    victim.write_text("not the sync's to write")
    return victim


@pytest.mark.parametrize(
    "entry",
    ["state.json.tmp", "state.json", "lock", "last-sync.json", "last-sync.json.tmp",
     "verify.json", "verify.json.tmp",
     "downloads/deltas__41-42.delta.part.json.tmp", "downloads/deltas__41-42.delta.part"],
)  # fmt: skip
def test_a_link_planted_as_a_file_of_the_state_directory(
    standby: Standby, tmp_path: Path, entry: str
) -> None:
    cmd, weights = standby
    victim = _victim(tmp_path)
    planted = _state(weights) / entry
    planted.parent.mkdir(exist_ok=True)
    planted.unlink(missing_ok=True)
    planted.symlink_to(victim)
    doc, _ = _refused(cmd, weights, victim.parent)
    assert doc["error"].startswith(f"{planted}: a symbolic link, where a sync keeps a regular file")


@pytest.mark.parametrize("entry", ["work", "downloads", ".", ".."])
def test_a_link_planted_as_a_directory_of_the_state_directory(
    standby: Standby, tmp_path: Path, entry: str
) -> None:
    """``work`` (where the next directory is staged), ``downloads``, the tier's state
    directory itself (``.standbyc/llama-7b``) and ``.standbyc``, each a link to a directory
    elsewhere."""
    cmd, weights = standby
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    planted = {".": _state(weights), "..": _state(weights).parent}.get(
        entry, _state(weights) / entry
    )
    if planted.exists():
        planted.rename(tmp_path / "moved")
    planted.symlink_to(elsewhere, target_is_directory=True)
    doc, _ = _refused(cmd, weights, elsewhere)
    assert doc["error"].startswith(f"{planted}: a symbolic link, where a sync keeps a directory")
    assert list(elsewhere.iterdir()) == []


# --- a damaged state.json ------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["fifo", "directory"])
def test_a_state_json_that_is_not_a_file(standby: Standby, kind: str) -> None:
    """A FIFO used to hang the sync holding the tier's lock; a directory made it exit 3
    after the swap. Both are refused before anything is written."""
    cmd, weights = standby
    path = _state(weights) / "state.json"
    path.unlink()
    os.mkfifo(path) if kind == "fifo" else path.mkdir()
    doc, _ = _refused(cmd, weights)
    what = "a FIFO" if kind == "fifo" else "a directory"
    assert doc["error"].startswith(f"{path}: {what}, where a sync keeps a regular file")


def _edit_state(weights: Path, edit: Callable[[dict[str, Any]], None], tier: str = TIER) -> None:
    path = StandbyDir(weights / tier / "llama-7b").state / "state.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))


BAD_STATES: dict[str, Callable[[dict[str, Any]], None]] = {
    "generation beyond float range": lambda d: d.update(generation=10**400),
    "generation -7": lambda d: d.update(generation=-7),
    "generation true": lambda d: d.update(generation=True),
    "served beyond float range": lambda d: d.update(served={"generation": 10**400}),
    "signature of strings": lambda d: d.update(signature=[["model.safetensors", "1", 2, 3, 4]]),
}


@pytest.mark.parametrize("damage", sorted(BAD_STATES))
def test_a_mistyped_state_is_no_state(
    standby: Standby, generations: dict[int, Path], damage: str
) -> None:
    """The sync reads the directory in full instead (a mistyped record of what the engines
    serve is dropped alone), and writes a sound state again."""
    cmd, weights = standby
    _edit_state(weights, BAD_STATES[damage])
    code, doc, err, took = run_sync(cmd)
    assert code == 0, err
    found = "cached" if damage.startswith("served") else "hashed"
    assert (doc["previous_generation"], doc["found_by"]) == (41, found), doc
    assert took < 30
    assert held(weights)["model.safetensors"] == generations[2].read_bytes()
    state = json.loads((_state(weights) / "state.json").read_text())
    assert state["generation"] == 42 and state["served"] == {}


@pytest.mark.parametrize("damage", sorted(BAD_STATES))
def test_the_report_pushes_no_mistyped_number(
    standby: Standby, compiled: Path, pushgateway: Pushgateway, damage: str
) -> None:
    """`weights report` used to exit 3 (OverflowError) or push -7 and 1 as generations.
    The hot tier's engines reload, so its report reads what they serve too."""
    cmd, weights = standby
    code, _, err, _ = run_sync(with_arg(with_arg(cmd, "--generation", "41"), "--target",
                                        str(weights / "hot/llama-7b")))  # fmt: skip
    assert code == 0, err
    for tier in (TIER, "hot"):
        _edit_state(weights, BAD_STATES[damage], tier)
    report = report_command(compiled, weights=weights, pushgateway=pushgateway.url)
    proc = subprocess.run(report, capture_output=True, text=True, timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    tiers = {t["tier"]: t for t in json.loads(proc.stdout)["tiers"]}
    metrics = pushgateway.metrics()
    sound = damage == "served beyond float range"  # the generation itself is right
    for tier in (TIER, "hot"):
        assert tiers[tier]["pushed"] is sound, tiers[tier]
        assert tiers[tier]["held_generation"] == (41 if sound else None), tiers[tier]
        assert _pushed(metrics, "standbyc_weights_generation", tier) == (["41"] if sound else [])
    assert _pushed(metrics, "standbyc_weights_served_generation", "hot") == (["0"] if sound else [])


def _pushed(metrics: str, name: str, tier: str) -> list[str]:
    """The values of ``name`` pushed for ``tier``."""
    return [line.rsplit(" ", 1)[1] for line in metrics.splitlines()
            if line.startswith(name + "{") and f'tier="{tier}"' in line]  # fmt: skip


def test_a_huge_state_json_is_not_read(standby: Standby, generations: dict[int, Path]) -> None:
    """400 MB (sparse: no disk) used to be read whole (840 MiB resident)."""
    cmd, weights = standby
    path = _state(weights) / "state.json"
    with path.open("r+b") as f:
        f.truncate(400 << 20)
    # bench/rss_child.py runs the same command and reports its own peak (VmHWM): a child's
    # ru_maxrss would count this process's pages, inherited across fork.
    code, doc, err, took = run_sync([sys.executable, str(REPO / "bench/rss_child.py"), *cmd[1:]])
    assert code == 0, err
    assert (doc["previous_generation"], doc["found_by"]) == (41, "hashed"), doc
    peak_kib = int(err.rsplit("VmHWM ", 1)[1].split()[0])
    assert peak_kib < 256 << 10, peak_kib  # the file alone is 400 MiB
    assert took < 30
    assert held(weights)["model.safetensors"] == generations[2].read_bytes()
    assert path.stat().st_size < 1 << 20  # a sound state again


def test_the_report_does_not_wait_on_a_fifo(
    standby: Standby, compiled: Path, tmp_path: Path
) -> None:
    _, weights = standby
    path = _state(weights) / "state.json"
    path.unlink()
    os.mkfifo(path)
    cmd = report_command(compiled, weights=weights, pushgateway="http://127.0.0.1:9/")
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    cold = next(t for t in json.loads(proc.stdout)["tiers"] if t["tier"] == TIER)
    assert cold["pushed"] is False and cold["held_generation"] is None, cold


# --- the cap on files per generation -------------------------------------------------------


def test_an_index_listing_more_files_than_a_model_directory_holds(
    standby: Standby, store: Path
) -> None:
    """12,000 files used to sync once, then the standby could not read its own directory
    and restaged everything on every sync: now one cap, on both sides."""
    cmd, weights = standby
    index = json.loads((store / "index.json").read_text())
    gen = index["generations"][1]
    sha = "0" * 64
    gen["files"] = [{"name": f"extra/{i:05d}", "size": 0, "sha256": sha} for i in range(12_000)]
    gen["size"] = gen["weights"]["size"]
    sums = [(f["name"], 0, sha) for f in gen["files"]]
    gen["digest"] = dir_digest(gen["weights"]["digest"], gen["weights"]["files"], sums)
    (store / "index.json").write_text(json.dumps(index))
    doc, _ = _refused(cmd, weights)
    assert f"12001 files; a model directory holds at most {MAX_FILES}" in doc["error"]
    assert leftovers(weights) == {}


def test_a_dead_store_says_what_it_waits_for(
    compiled: Path, tmp_path: Path, served: FaultServer
) -> None:
    """By hand, without --deadline: each wait is announced as it begins, and the sync ends."""
    weights = tmp_path / "weights"
    cmd = job_command(compiled, TIER, source=served.url, weights=weights)
    code, _, err, _ = run_sync(with_arg(cmd, "--generation", "41"))
    assert code == 0, err
    before = tree_state(weights)
    dead = "http://127.0.0.1:9/"  # discard: nothing listens
    argv = [str(STANDBYC), "weights", "sync", "--source", dead, "--generation", "42",
            "--target", str(weights / TARGET), "--retries", "3", "--format", "json"]  # fmt: skip
    code, doc, err, took = run_sync(argv, timeout=60)
    assert code == 4, err
    waits = [line for line in err.splitlines() if "waiting" in line]
    assert len(waits) == 3, err
    assert waits[0].startswith(f"standbyc: {dead}index.json: [Errno 111] Connection refused; "
                               "waiting "), waits  # fmt: skip
    assert re.search(r"for retry 1 of 3 \(--retries\); the budget ends in (29\d|300) s", waits[0])
    assert took < 20
    assert doc["deadline_seconds"] == 300
    assert tree_state(weights) == before


def test_a_sync_by_hand_has_a_budget(standby: Standby, store: Path) -> None:
    """Without --deadline: 5 minutes plus two full copies at --min-rate (100 Mbit/s)."""
    cmd, _ = standby
    at = cmd.index("--deadline")
    by_hand = [*cmd[:at], *cmd[at + 2 :]]
    at = by_hand.index("--min-rate")
    by_hand = [*by_hand[:at], *by_hand[at + 2 :]]
    code, doc, err, _ = run_sync(by_hand)
    assert code == 0, err
    size = json.loads((store / "index.json").read_text())["generations"][1]["size"]
    assert doc["deadline_seconds"] == round(300 + 2 * size * 8 / 100e6, 3)
