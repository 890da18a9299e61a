"""Merged deltas: F->G then G->H composed without a checkpoint rebuilds H bit for bit."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.weights import compose as merge_module
from compiler.weights.apply import apply
from compiler.weights.compose import MergeImpossible, merge
from compiler.weights.deltafile import DeltaReader
from compiler.weights.diff import diff
from compiler.weights.errors import DeltaError
from tests.weights.conftest import _write, sha256, shard

CHUNK = 4096
Tensors = dict[str, tuple[str, tuple[int, ...], Any]]


def _base(rng: np.random.Generator) -> Tensors:
    out: Tensors = {}
    for i, elems in enumerate((5000, 3000, 40, 2048)):
        dtype = "BF16" if i % 2 == 0 else "F32"
        width = 2 if dtype == "BF16" else 4
        out[f"t{i}"] = (dtype, (elems,), rng.integers(0, 256, elems * width, dtype=np.uint8))
    return out


def _step(ts: Tensors, rng: np.random.Generator, change: str) -> Tensors:
    """The next generation: a sparse update everywhere, plus one layout change."""
    out: Tensors = {}
    for name, (dt, shape, data) in ts.items():
        new = data.copy()
        k = int(rng.integers(0, max(1, data.size // 50)))
        idx = rng.integers(0, data.size, k)
        new[idx] ^= rng.integers(1, 256, k, dtype=np.uint8)
        out[name] = (dt, shape, new)
    names = sorted(out)
    victim = names[int(rng.integers(0, len(names)))]
    dt, shape, data = out[victim]
    if change == "dense":
        out[victim] = (dt, shape, rng.integers(0, 256, data.size, dtype=np.uint8))
    elif change == "add":
        out[f"new{rng.integers(1 << 30)}"] = ("BF16", (700,), rng.integers(0, 256, 1400, np.uint8))
    elif change == "remove" and len(out) > 1:
        del out[victim]
    elif change == "rename":
        out[f"moved{rng.integers(1 << 30)}"] = out.pop(victim)
    elif change == "reshape" and (data.size // _width(dt)) % 2 == 0:
        out[victim] = (dt, (2, data.size // (2 * _width(dt))), data)
    elif change == "retype":
        out[victim] = ("F16" if dt == "BF16" else "BF16", (data.size // 2,), data)
    elif change == "resize":
        half = data.size // _width(dt) // 2
        out[victim] = (dt, (half,), data[: half * _width(dt)])
    elif change == "revert":
        out[victim] = ts[victim]
    return out


def _width(dtype: str) -> int:
    return {"BF16": 2, "F16": 2, "F32": 4}[dtype]


def _save(ts: Tensors, where: Path, shards: int) -> Path:
    single = where.with_suffix(".safetensors")
    _write(single, ts, {"format": "pt"})
    if shards == 1:
        return single
    shard(single, where, min(shards, len(ts)))  # a shard with no tensor is no checkpoint file
    single.unlink()
    return where


CHANGES = ["none", "dense", "add", "remove", "rename", "reshape", "retype", "resize", "revert"]


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    seed=st.integers(0, 2**32 - 1),
    changes=st.lists(st.sampled_from(CHANGES), min_size=2, max_size=4),
    shards=st.lists(st.integers(1, 3), min_size=5, max_size=5),
)
def test_merged_deltas_rebuild_the_target_bit_for_bit(
    seed: int, changes: list[str], shards: list[int]
) -> None:
    rng = np.random.default_rng(seed)
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp)
        gens = [_base(rng)]
        for c in changes:
            gens.append(_step(gens[-1], rng, c))
        paths = [_save(ts, d / f"g{i}", shards[i]) for i, ts in enumerate(gens)]
        steps = []
        for i in range(1, len(paths)):
            steps.append(d / f"{i - 1}-{i}.delta")
            diff(paths[i], steps[-1], old_path=paths[i - 1], chunk=CHUNK)
        merged = steps[0]
        for i, step in enumerate(steps[1:], start=2):
            out = d / f"0-{i}.delta"
            merge(merged, step, out)
            merged = out
        built = d / "rebuilt" / paths[-1].name
        built.parent.mkdir()
        stats = apply(paths[0], merged, built)
        assert sha256(built) == sha256(paths[-1])
        direct = d / "direct.delta"
        diff(paths[-1], direct, old_path=paths[0], chunk=CHUNK)
        assert stats.target_digest == DeltaReader(direct).header.target_digest


def test_a_merge_of_unchained_deltas_is_refused(tmp_path: Path) -> None:
    rng = np.random.default_rng(3)
    a, b = _base(rng), _base(rng)
    pa, pb = _save(a, tmp_path / "a", 1), _save(b, tmp_path / "b", 1)
    diff(pb, tmp_path / "ab.delta", old_path=pa, chunk=CHUNK)
    with pytest.raises(DeltaError, match="the deltas do not follow each other"):
        merge(tmp_path / "ab.delta", tmp_path / "ab.delta", tmp_path / "out.delta")
    assert not (tmp_path / "out.delta").exists()


def test_a_corrupt_input_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    rng = np.random.default_rng(4)
    g0 = _base(rng)
    g1 = _step(g0, rng, "none")
    g2 = _step(g1, rng, "none")
    p = [_save(ts, tmp_path / f"g{i}", 1) for i, ts in enumerate((g0, g1, g2))]
    diff(p[1], tmp_path / "01.delta", old_path=p[0], chunk=CHUNK)
    diff(p[2], tmp_path / "12.delta", old_path=p[1], chunk=CHUNK)
    raw = bytearray((tmp_path / "12.delta").read_bytes())
    raw[-3] ^= 0xFF
    (tmp_path / "bad.delta").write_bytes(bytes(raw))
    with pytest.raises(DeltaError, match="payload checksum mismatch"):
        merge(tmp_path / "01.delta", tmp_path / "bad.delta", tmp_path / "out.delta")
    assert sorted(x.name for x in tmp_path.iterdir()) == sorted(
        ["01.delta", "12.delta", "bad.delta", "g0.safetensors", "g1.safetensors", "g2.safetensors"]
    )


def _planes(rng: np.random.Generator, n: int, plane: int) -> Any:
    """A bf16 XOR mask with random bytes in one byte plane only: it compresses to half."""
    mask = np.zeros(n * 2, dtype=np.uint8)
    mask[plane::2] = rng.integers(1, 256, n, dtype=np.uint8)
    return mask


def impossible_chain(rng: np.random.Generator) -> list[Tensors]:
    """Three generations whose two deltas are dense XOR patches (each mask compresses to
    half) but whose merged mask is random: stored only as new bytes, it needs the base."""
    n = 4096
    f = rng.integers(0, 256, n * 2, dtype=np.uint8)
    g = f ^ _planes(rng, n, 0)
    h = g ^ _planes(rng, n, 1)
    return [{"w": ("BF16", (n,), x)} for x in (f, g, h)]


def test_a_merge_that_needs_the_base_says_so(tmp_path: Path) -> None:
    gens = impossible_chain(np.random.default_rng(5))
    p = [_save(ts, tmp_path / f"g{i}", 1) for i, ts in enumerate(gens)]
    diff(p[1], tmp_path / "01.delta", old_path=p[0], chunk=CHUNK)
    diff(p[2], tmp_path / "12.delta", old_path=p[1], chunk=CHUNK)
    for d in ("01", "12"):
        ops = {c.op for c in DeltaReader(tmp_path / f"{d}.delta").header.tensors[0].chunks}
        assert ops == {"x"}  # both relative: only their merge is not
    with pytest.raises(MergeImpossible, match="chunk 0: the merged change is stored only as new"):
        merge(tmp_path / "01.delta", tmp_path / "12.delta", tmp_path / "out.delta")
    assert not list(tmp_path.glob("*out.delta*"))


def _wide(rng: np.random.Generator, tensors: int) -> Tensors:
    """A checkpoint of ``tensors`` small tensors: enough for a merge to use worker
    processes."""
    return {
        f"w{i:02d}": ("BF16", (3000,), rng.integers(0, 256, 6000, dtype=np.uint8))
        for i in range(tensors)
    }


def _chain(tmp_path: Path, gens: list[Tensors]) -> list[Path]:
    paths = [_save(ts, tmp_path / f"g{i}", 1) for i, ts in enumerate(gens)]
    steps = []
    for i in range(1, len(paths)):
        steps.append(tmp_path / f"{i - 1}{i}.delta")
        diff(paths[i], steps[-1], old_path=paths[i - 1], chunk=CHUNK)
    return [*paths, *steps]


def test_a_merge_in_worker_processes_writes_the_one_process_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rng = np.random.default_rng(6)
    g0 = _wide(rng, 3 * merge_module.PARALLEL_FROM)
    g1 = _step(g0, rng, "rename")
    g2 = _step(g1, rng, "dense")
    g0p, _, g2p, d01, d12 = _chain(tmp_path, [g0, g1, g2])
    monkeypatch.setattr(merge_module, "PARALLEL_BYTES", 0)
    forked = merge(d01, d12, tmp_path / "forked.delta")
    monkeypatch.setattr(merge_module, "PARALLEL_FROM", 10**9)
    here = merge(d01, d12, tmp_path / "here.delta")
    assert (tmp_path / "forked.delta").read_bytes() == (tmp_path / "here.delta").read_bytes()
    assert forked == here
    built = tmp_path / "built" / "g2.safetensors"
    built.parent.mkdir()
    apply(g0p, tmp_path / "forked.delta", built)
    assert sha256(built) == sha256(g2p)


def test_a_worker_that_cannot_merge_its_tensor_refuses_the_whole_merge(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(merge_module, "PARALLEL_BYTES", 0)
    rng = np.random.default_rng(7)
    wide = _wide(rng, 2 * merge_module.PARALLEL_FROM)
    gens = [{**wide, **ts} for ts in impossible_chain(rng)]  # one tensor needs the base
    *_, d01, d12 = _chain(tmp_path, gens)
    with pytest.raises(MergeImpossible, match="'w' chunk 0: the merged change is stored only"):
        merge(d01, d12, tmp_path / "out.delta")
    assert not (tmp_path / "out.delta").exists()
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out.delta")]
