"""diff then apply must rebuild NEW byte for byte, for every pair and mode."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from safetensors.numpy import load_file

from compiler.cli import main
from compiler.weights.safetensors_io import Checkpoint
from tests.test_compile_kills import HOOK as KILL_HOOK
from tests.weights.conftest import Pair, sha256

PAIRS = [
    "rl_bf16", "finetune_fp32", "nothing_changed", "all_changed", "tensor_added",
    "tensor_removed", "swapped", "renamed_reshaped_retyped", "sharded", "shard_layout_changed",
    "single_to_sharded",
]  # fmt: skip
TORCH_PAIRS = ["torch_rl_bf16", "torch_finetune_fp32"]
ROOT = Path(__file__).resolve().parents[2]


def run(*argv: str | Path) -> int:
    return main([str(a) for a in argv])


def roundtrip(p: Pair, tmp: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, object]:
    delta, out = tmp / "d.delta", tmp / "out"
    before = sha256(p.old)
    assert run("weights", "diff", p.old, p.new, "-o", delta, "--format", "json") == 0
    stats: dict[str, object] = json.loads(capsys.readouterr().out)
    assert run("weights", "apply", p.old, delta, "-o", out) == 0
    assert sha256(out) == sha256(p.new)
    assert sha256(p.old) == before  # base untouched
    # Sender holding only the standby's manifest: changed chunks are sent raw.
    man, delta2, out2 = tmp / "m.json", tmp / "d2.delta", tmp / "out2"
    assert run("weights", "manifest", p.old, "-o", man) == 0
    assert run("weights", "diff", "--base-manifest", man, p.new, "-o", delta2) == 0
    capsys.readouterr()
    assert run("weights", "apply", p.old, delta2, "-o", out2, "--reread", "--format", "json") == 0
    assert json.loads(capsys.readouterr().out)["reread"] is True
    assert sha256(out2) == sha256(p.new)
    return stats


@pytest.mark.parametrize("name", PAIRS)
def test_roundtrip(
    name: str, pairs: dict[str, Pair], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    roundtrip(pairs[name], tmp_path, capsys)


@pytest.mark.parametrize("name", TORCH_PAIRS)
def test_roundtrip_torch_trained(
    name: str, torch_pairs: dict[str, Pair], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stats = roundtrip(torch_pairs[name], tmp_path, capsys)
    if name == "torch_rl_bf16":
        assert 0.01 <= changed_fraction(torch_pairs[name]) <= 0.03
        assert float(stats["ratio"]) <= 0.02  # type: ignore[arg-type]


def changed_fraction(p: Pair) -> float:
    a, b = Checkpoint(p.old), Checkpoint(p.new)
    changed = total = 0
    for loc in a.tensors():
        t = loc.info
        o = loc.file.view(t.begin, t.end).view(np.uint16)
        nb = b.by_name[t.name]
        n = nb.file.view(nb.info.begin, nb.info.end).view(np.uint16)
        changed += int(np.count_nonzero(o != n))
        total += o.size
    return changed / total


def test_rl_delta_is_small(
    pairs: dict[str, Pair], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    frac = changed_fraction(pairs["rl_bf16"])
    assert 0.01 <= frac <= 0.03
    stats = roundtrip(pairs["rl_bf16"], tmp_path, capsys)
    assert float(stats["ratio"]) <= 0.02  # type: ignore[arg-type]
    assert stats["chunks"] == {"sp": stats["chunks"]["sp"]}  # type: ignore[index]


def test_finetune_delta_below_changed_tensors(
    pairs: dict[str, Pair], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    p = pairs["finetune_fp32"]
    stats = roundtrip(p, tmp_path, capsys)
    new = Checkpoint(p.new)
    changed = sum(
        new.by_name[n].info.nbytes for n in ("layers.1.mlp.up.weight", "layers.1.norm.weight")
    )
    assert int(stats["delta_bytes"]) <= changed  # type: ignore[call-overload]
    assert stats["tensors"] == {"patched": 2, "unchanged": 10}


def test_nothing_changed_sends_only_headers(
    pairs: dict[str, Pair], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stats = roundtrip(pairs["nothing_changed"], tmp_path, capsys)
    assert stats["chunks"] == {}
    assert int(stats["delta_bytes"]) < 4096  # type: ignore[call-overload]


def test_rename_reshape_retype_are_copies(
    pairs: dict[str, Pair], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stats = roundtrip(pairs["renamed_reshaped_retyped"], tmp_path, capsys)
    assert stats["tensors"] == {"unchanged": 9, "copied": 3}
    assert stats["chunks"] == {}


def test_swapped_tensors_are_copies_not_patches(
    pairs: dict[str, Pair], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Each swapped tensor is first patched against its namesake while it is hashed,
    then found whole under the other name: the patch is dropped from the payload."""
    p = pairs["swapped"]
    stats = roundtrip(p, tmp_path, capsys)
    assert stats["tensors"] == {"unchanged": 10, "copied": 2}
    assert stats["chunks"] == {}
    nothing = tmp_path / "nothing.delta"
    assert run("weights", "diff", p.old, p.old, "-o", nothing) == 0
    # Only the two tensors' source names and hashes differ from an empty delta.
    assert int(stats["delta_bytes"]) - nothing.stat().st_size < 300  # type: ignore[call-overload]


def test_in_place_file_and_directory(pairs: dict[str, Pair], tmp_path: Path) -> None:
    for name in ("rl_bf16", "sharded"):
        p = pairs[name]
        base = tmp_path / name
        if p.old.is_dir():
            shutil.copytree(p.old, base)
        else:
            shutil.copyfile(p.old, base)
        delta = tmp_path / f"{name}.delta"
        assert run("weights", "diff", p.old, p.new, "-o", delta) == 0
        assert run("weights", "apply", base, delta, "--in-place") == 0
        assert sha256(base) == sha256(p.new)
        # Applying again must be refused: the base has moved on.
        assert run("weights", "apply", base, delta, "--in-place") == 2
        assert sha256(base) == sha256(p.new)
        leftovers = [x.name for x in tmp_path.iterdir() if "standbyc-tmp" in x.name]
        assert leftovers == []


def test_verify(pairs: dict[str, Pair], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    p = pairs["sharded"]
    man = tmp_path / "m.json"
    assert run("weights", "manifest", p.new, "-o", man) == 0
    assert run("weights", "verify", p.new, "--manifest", man) == 0
    capsys.readouterr()
    assert run("weights", "verify", p.old, "--manifest", man) == 1
    err = capsys.readouterr().err
    assert "chunk(s) differ, first at byte offset 0 of the tensor" in err


def test_manifest_stdout_is_json(
    pairs: dict[str, Pair], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run("weights", "manifest", pairs["sharded"].new) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["sharded"] is True
    assert len(doc["files"]) == 3
    t = doc["files"][0]["tensors"][0]
    assert set(t) == {"name", "dtype", "shape", "offset", "nbytes", "xxh128", "chunks"}


def test_our_writer_is_real_safetensors(pairs: dict[str, Pair]) -> None:
    loaded = load_file(str(pairs["finetune_fp32"].new))
    ck = Checkpoint(pairs["finetune_fp32"].new)
    for name, arr in loaded.items():
        t = ck.by_name[name]
        assert arr.tobytes() == ck.by_name[name].file.view(t.info.begin, t.info.end).tobytes()


def test_apply_across_filesystems(pairs: dict[str, Pair], tmp_path: Path) -> None:
    """Output on another filesystem (tmpfs) than the base: in-kernel copy must fall back."""
    shm = Path("/dev/shm")
    assert shm.is_dir(), "the test needs /dev/shm, a tmpfs every Linux has"
    p = pairs["rl_bf16"]
    delta = tmp_path / "d.delta"
    out = shm / f"standbyc-test-{os.getpid()}.safetensors"
    assert run("weights", "diff", p.old, p.new, "-o", delta) == 0
    try:
        assert run("weights", "apply", p.old, delta, "-o", out) == 0
        assert sha256(out) == sha256(p.new)
    finally:
        out.unlink(missing_ok=True)


def _apply_killed_at(base: Path, delta: Path, stop: int, log: Path) -> int:
    """``weights apply --in-place``, SIGKILLed at its ``stop``-th file-system step (0: never),
    its steps written to ``log``."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1",
           "FAULT_ROOT": str(base.parent), "FAULT_AT": str(stop),
           "FAULT_LOG": str(log)}  # fmt: skip
    proc = subprocess.run([sys.executable, "-c", KILL_HOOK, "weights", "apply", str(base),
                           str(delta), "--in-place"], env=env, capture_output=True, timeout=120,
                          check=False)  # fmt: skip
    return proc.returncode


def test_killed_apply_leaves_old_or_new(pairs: dict[str, Pair], tmp_path: Path) -> None:
    """SIGKILL apply --in-place at each of its file-system steps: BASE is always the old or
    the new file, and the next apply finishes the job."""
    p = pairs["rl_bf16"]
    delta = tmp_path / "d.delta"
    assert run("weights", "diff", p.old, p.new, "-o", delta) == 0
    old_sha, new_sha = sha256(p.old), sha256(p.new)
    work = tmp_path / "work"
    work.mkdir()
    base, log = work / "base.safetensors", tmp_path / "steps.json"
    shutil.copyfile(p.old, base)
    assert _apply_killed_at(base, delta, 0, log) == 0
    steps = json.loads(log.read_text())
    assert "os.rename" in steps or "renameat2" in steps, steps
    seen = set()
    for stop in range(1, len(steps) + 1):
        shutil.copyfile(p.old, base)
        assert _apply_killed_at(base, delta, stop, log) == -signal.SIGKILL, (stop, steps)
        got = sha256(base)
        assert got in (old_sha, new_sha), (stop, steps[stop - 1])
        seen.add(got)
        for leftover in work.glob(".base.safetensors.standbyc-tmp-*"):
            leftover.unlink()  # a killed apply may leave its temp file, never a mixed BASE
    # Killed before the rename, the old file; after it, the new one (never a mix).
    renamed = max(i for i, s in enumerate(steps, 1) if s in ("os.rename", "renameat2"))
    assert seen == ({old_sha, new_sha} if renamed < len(steps) else {old_sha})
    assert _apply_killed_at(base, delta, 0, log) == 0
    assert sha256(base) == new_sha
