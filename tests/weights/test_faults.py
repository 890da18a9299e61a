"""weights under faults: no leaks after kills, no hangs on FIFOs, clear errors for odd paths."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.weights.conftest import Pair, sha256

ROOT = Path(__file__).resolve().parents[2]


def _standbyc(*args: object, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "compiler", *map(str, args)],
        env=dict(os.environ, PYTHONPATH=str(ROOT)), capture_output=True, text=True,
        timeout=timeout, check=False,
    )  # fmt: skip


def test_kills_during_apply_then_a_clean_run_leaves_nothing_behind(
    pairs: dict[str, Pair], tmp_path: Path
) -> None:
    """Twelve kills, at random moments or mid-write: each leaves the old or the new BASE
    and maybe a temp file; the next apply removes every stale temp (no one holds its lock)
    and succeeds."""
    p = pairs["rl_bf16"]
    delta = tmp_path / "d.delta"
    assert _standbyc("weights", "diff", p.old, p.new, "-o", delta).returncode == 0
    base = tmp_path / "base.safetensors"
    shutil.copyfile(p.old, base)
    old_sha, new_sha = sha256(p.old), sha256(p.new)
    rng = random.Random(12)
    left = 0
    for _ in range(12):
        shutil.copyfile(p.old, tmp_path / "copy")
        (tmp_path / "copy").replace(base)
        proc = subprocess.Popen(
            [sys.executable, "-m", "compiler", "weights", "apply", str(base), str(delta),
             "--in-place"], env=dict(os.environ, PYTHONPATH=str(ROOT)),
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        if rng.random() < 0.5:
            time.sleep(rng.uniform(0.05, 0.6))  # a random moment
        else:  # the moment its temp file exists: mid-write
            while proc.poll() is None and not list(tmp_path.glob(".base.*standbyc-tmp-*")):
                time.sleep(0.001)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert sha256(base) in (old_sha, new_sha)
        left += len(list(tmp_path.glob(".base.safetensors.standbyc-tmp-*")))
    shutil.copyfile(p.old, base)
    result = _standbyc("weights", "apply", base, delta, "--in-place")
    assert result.returncode == 0, result.stderr
    assert sha256(base) == new_sha
    assert not list(tmp_path.glob(".base.safetensors.standbyc-tmp-*"))
    assert left > 0  # some kills did leave a temp file for the clean run to remove


def test_a_fifo_is_refused_not_waited_on(pairs: dict[str, Pair], tmp_path: Path) -> None:
    p = pairs["rl_bf16"]
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    for args, message in (
        (("apply", p.old, fifo, "-o", tmp_path / "o"), "not a regular file; a delta must be one"),
        (("manifest", fifo), "not a regular file; a safetensors file must be one"),
        (("verify", p.old, "--manifest", fifo), "not a regular file; a manifest must be one"),
    ):
        result = _standbyc("weights", *args, timeout=20)
        assert result.returncode == 2, result.stderr
        assert f"{fifo}: {message}" in result.stderr


def test_a_missing_output_directory_is_exit_2(pairs: dict[str, Pair], tmp_path: Path) -> None:
    p = pairs["rl_bf16"]
    delta = tmp_path / "d.delta"
    assert _standbyc("weights", "diff", p.old, p.new, "-o", delta).returncode == 0
    result = _standbyc("weights", "apply", p.old, delta, "-o", tmp_path / "nowhere" / "x")
    assert result.returncode == 2
    assert f"the directory {tmp_path / 'nowhere'} does not exist" in result.stderr


def test_in_place_through_a_symlink_updates_the_file_it_names(
    pairs: dict[str, Pair], tmp_path: Path
) -> None:
    p = pairs["rl_bf16"]
    delta = tmp_path / "d.delta"
    assert _standbyc("weights", "diff", p.old, p.new, "-o", delta).returncode == 0
    real = tmp_path / "real.safetensors"
    shutil.copyfile(p.old, real)
    link = tmp_path / "current.safetensors"
    link.symlink_to(real.name)
    result = _standbyc("weights", "apply", link, delta, "--in-place")
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and sha256(real) == sha256(p.new)
