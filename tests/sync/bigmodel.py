"""A multi-GiB model directory pair, written quickly and tensor by tensor: generation 1 of
random bf16 bits in ``shards`` safetensors files with their index and a config, and
generation 2 with ``frac`` of its elements nudged by 1-3 ulps, as one RL step leaves a
model. For the plan's calibration (bench/plan_calibration.py) and the test that holds a
real sync to the plan (tests/sync/test_plan_calibration.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from compiler.weights.testing import write_safetensors

MIB = 2**20
TENSOR = 64 * MIB  # bytes of one tensor: 32 Mi bf16 elements
ROW = 4096


def _tensor(shard: int, index: int, generation: int, frac: float) -> np.ndarray[Any, Any]:
    elements = TENSOR // 2
    rng = np.random.default_rng([1, shard, index])
    w = rng.integers(0, 1 << 63, elements // 4, dtype=np.uint64).view(np.uint16)
    if generation == 2:
        nudge = np.random.default_rng([2, shard, index])
        pos = nudge.integers(0, elements, int(elements * frac))
        w[pos] ^= nudge.integers(1, 4, len(pos), dtype=np.uint16)
    return w


def pair(root: Path, gib: float, *, shards: int = 3, frac: float = 0.02) -> dict[int, Path]:
    """Generations 1 and 2 under ``root``; ``gib`` is the model's size."""
    per_shard = max(1, round(gib * 1024 * MIB / TENSOR / shards))
    out = {g: root / f"generation-{g}" for g in (1, 2)}
    for g, directory in out.items():
        directory.mkdir(parents=True)
        (directory / "config.json").write_text(json.dumps({"model_type": "llama"}))
        weight_map: dict[str, str] = {}
        for s in range(shards):
            name = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
            specs = [(f"layers.{s}.{i}.weight", "BF16", (TENSOR // 2 // ROW, ROW))
                     for i in range(per_shard)]  # fmt: skip
            weight_map |= {tensor: name for tensor, _, _ in specs}

            def produce(tensor: str, s: int = s, g: int = g) -> np.ndarray[Any, Any]:
                return _tensor(s, int(tensor.split(".")[2]), g, frac)

            write_safetensors(directory / name, specs, produce, {"format": "pt"})
        index = {"metadata": {"total_size": shards * per_shard * TENSOR}, "weight_map": weight_map}
        (directory / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))
    return out


def size(directory: Path) -> int:
    return sum(p.stat().st_size for p in directory.rglob("*") if p.is_file())
