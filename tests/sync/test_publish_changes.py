"""A publish whose model directory changes, or loses a file, while it runs.

The publish is stopped (SIGSTOP) as soon as it begins to copy the weights, the directory
is changed, and the publish resumed: it must refuse (exit 2) within a bound, leave the
store byte for byte as it was, and the same generation must publish once the directory
is still.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.faultserver import FaultServer
from tests.sync.conftest import (
    STANDBYC,
    TIER,
    job_command,
    publish,
    run_sync,
    sha256,
    tree_state,
    with_arg,
)


@pytest.fixture
def model(tmp_path: Path, generations: dict[int, Path]) -> Path:
    """Generation 2 as a directory with a config and a 64 MiB tokenizer: hashing the other
    files keeps the publish busy after the weights' copy, long enough to be caught."""
    root = tmp_path / "model"
    root.mkdir()
    shutil.copyfile(generations[2], root / "model.safetensors")
    (root / "config.json").write_text('{"architectures": ["LlamaForCausalLM"]}')
    (root / "tokenizer.bin").write_bytes(os.urandom(1 << 20) * 64)
    return root


def _stopped_at_the_copy(argv: list[str], store: Path) -> subprocess.Popen[str]:
    """Start ``argv`` and stop it once the weights' copy (the new anchor's temp directory)
    appears in the store."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    anchors = store / "anchors"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and proc.poll() is None:
        if anchors.is_dir() and any(".standbyc-tmp-" in p.name for p in anchors.iterdir()):
            os.kill(proc.pid, signal.SIGSTOP)
            return proc
    proc.kill()
    raise AssertionError(f"the publish never began its copy: {proc.communicate()}")


def _rewrite_weights(model: Path) -> None:
    with (model / "model.safetensors").open("r+b") as f:  # in place: same size and inode
        f.seek(-4096, os.SEEK_END)
        f.write(b"\x01" * 4096)


CHANGES: dict[str, tuple[Callable[[Path], None], str]] = {
    "weights rewritten": (_rewrite_weights, "model.safetensors: changed while it was published"),
    "config removed": (lambda m: (m / "config.json").unlink(),
                       "config.json: disappeared while it was published"),
    "weights removed": (lambda m: (m / "model.safetensors").unlink(),
                        "model.safetensors: disappeared while it was published"),
    "tokenizer grown": (lambda m: (m / "tokenizer.bin").open("ab").write(b"more"),
                        "tokenizer.bin: changed while it was published"),
}  # fmt: skip


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_a_directory_that_changes_while_it_is_published(
    tmp_path: Path, generations: dict[int, Path], model: Path, change: str
) -> None:
    store = tmp_path / "store"
    publish(generations[1], store, 41)
    before = tree_state(store)
    argv = [str(STANDBYC), "weights", "publish", str(model), "--to", str(store),
            "--generation", "42", "--format", "json"]  # fmt: skip
    started = time.monotonic()
    proc = _stopped_at_the_copy(argv, store)
    edit, message = CHANGES[change]
    edit(model)
    os.kill(proc.pid, signal.SIGCONT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2, err
    assert "Traceback" not in err
    assert time.monotonic() - started < 30
    assert message in json.loads(out)["error"], out
    assert tree_state(store) == before  # no generation no standby can use, nothing left


def test_the_generation_publishes_once_the_directory_is_still(
    tmp_path: Path, generations: dict[int, Path], model: Path, compiled: Path
) -> None:
    """A refused publish burns nothing: the same number publishes, and a standby syncs it."""
    store = tmp_path / "store"
    publish(generations[1], store, 41)
    argv = [str(STANDBYC), "weights", "publish", str(model), "--to", str(store),
            "--generation", "42", "--format", "json"]  # fmt: skip
    proc = _stopped_at_the_copy(argv, store)
    _rewrite_weights(model)
    os.kill(proc.pid, signal.SIGCONT)
    assert proc.wait(timeout=60) == 2
    doc = publish(model, store, 42)
    assert doc["delta_from"] == 41 and not doc["already_published"]
    server = FaultServer(store).start()
    try:
        weights = tmp_path / "weights"
        cmd = job_command(compiled, TIER, source=server.url, weights=weights)
        for generation in ("41", "42"):
            code, _, err, _ = run_sync(with_arg(cmd, "--generation", generation))
            assert code == 0, err
    finally:
        server.stop()
    synced = weights / TIER / "llama-7b"
    assert sha256(synced / "model.safetensors") == sha256(model / "model.safetensors")
    assert sha256(synced / "tokenizer.bin") == sha256(model / "tokenizer.bin")


def test_a_read_only_store_is_exit_2(
    tmp_path: Path, generations: dict[int, Path], tmpfs: object
) -> None:
    assert callable(tmpfs)
    store = tmpfs(tmp_path / "store", "40m")
    publish(generations[1], store, 41)
    before = tree_state(store)
    subprocess.run(["mount", "-o", "remount,ro", str(store)], check=True)
    try:
        started = time.monotonic()
        proc = subprocess.run([str(STANDBYC), "weights", "publish", str(generations[2]), "--to",
                               str(store), "--generation", "42"], capture_output=True, text=True,
                              timeout=60, check=False)  # fmt: skip
        took = time.monotonic() - started
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(store)], check=True)
    assert proc.returncode == 2, proc.stderr
    assert "Read-only file system; a publish writes" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert took < 30
    assert tree_state(store) == before
