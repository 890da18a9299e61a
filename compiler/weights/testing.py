"""Realistic synthetic checkpoint pairs for tests and benchmarks (numpy only).

The RL-like pair mimics what a real update does to bf16 weights: fp32 master
weights take a few small Adam-like steps and are rounded to bf16 again, so only
the elements whose rounding flips change (about 1-3% at small learning rates).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import numpy.typing as npt

from compiler.weights.safetensors_io import DTYPE_WIDTH

Spec = tuple[str, str, tuple[int, ...]]  # name, dtype, shape


def to_bf16(x: npt.NDArray[np.float32]) -> npt.NDArray[np.uint16]:
    """Round fp32 to bf16 bits (round to nearest even), as torch does."""
    u = x.view(np.uint32)
    bias = ((u >> 16) & 1) + np.uint32(0x7FFF)
    return ((u + bias) >> 16).astype(np.uint16)


def write_safetensors(
    path: Path,
    specs: Sequence[Spec],
    produce: Callable[[str], npt.NDArray[np.generic]],
    metadata: dict[str, str] | None = None,
) -> None:
    """Write a safetensors file tensor by tensor (never the whole model in RAM)."""
    header: dict[str, object] = {}
    if metadata is not None:
        header["__metadata__"] = metadata
    pos = 0
    for name, dtype, shape in specs:
        n = math.prod(shape) * DTYPE_WIDTH[dtype]
        header[name] = {"dtype": dtype, "shape": list(shape), "data_offsets": [pos, pos + n]}
        pos += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # pad like safetensors so data is 8-aligned
    with path.open("wb") as f:
        f.write(len(raw).to_bytes(8, "little"))
        f.write(raw)
        for name, dtype, shape in specs:
            arr = np.ascontiguousarray(produce(name))
            n = math.prod(shape) * DTYPE_WIDTH[dtype]
            if arr.nbytes != n:
                raise ValueError(f"{name}: produced {arr.nbytes} bytes, expected {n}")
            f.write(arr.data)


def transformer_specs(layers: int, hidden: int, vocab: int, dtype: str = "BF16") -> list[Spec]:
    specs: list[Spec] = [("embed.weight", dtype, (vocab, hidden))]
    for i in range(layers):
        p = f"layers.{i}."
        specs += [
            (p + "attn.qkv.weight", dtype, (3 * hidden, hidden)),
            (p + "attn.out.weight", dtype, (hidden, hidden)),
            (p + "mlp.up.weight", dtype, (4 * hidden, hidden)),
            (p + "mlp.down.weight", dtype, (hidden, 4 * hidden)),
            (p + "norm.weight", dtype, (hidden,)),
        ]
    specs.append(("final_norm.weight", dtype, (hidden,)))
    return specs


def _master(name: str, shape: tuple[int, ...], seed: int) -> npt.NDArray[np.float32]:
    rng = np.random.default_rng([seed, *name.encode()])
    w = rng.standard_normal(shape, dtype=np.float32)
    if name.endswith("norm.weight"):
        return np.float32(1.0) + np.float32(0.01) * w
    return np.float32(0.02) * w


def adam_like_step(
    w: npt.NDArray[np.float32], lr: float, steps: int, rng: np.random.Generator
) -> npt.NDArray[np.float32]:
    """Early Adam steps move each weight by about ``lr`` with a noisy sign."""
    for _ in range(steps):
        sign = rng.integers(0, 2, w.shape, dtype=np.int8) * np.int8(2) - np.int8(1)
        w = w - np.float32(lr) * sign.astype(np.float32)
    return w


def rl_pair(
    old: Path,
    new: Path,
    specs: Sequence[Spec],
    *,
    lr: float = 2e-6,
    steps: int = 1,
    seed: int = 0,
) -> None:
    """bf16 checkpoints before/after a few small steps on fp32 masters."""

    def before(name: str) -> npt.NDArray[np.generic]:
        shape = next(s for n, _, s in specs if n == name)
        return to_bf16(_master(name, shape, seed))

    def after(name: str) -> npt.NDArray[np.generic]:
        shape = next(s for n, _, s in specs if n == name)
        rng = np.random.default_rng([seed + 1, *name.encode()])
        return to_bf16(adam_like_step(_master(name, shape, seed), lr, steps, rng))

    write_safetensors(old, specs, before, {"format": "pt", "step": "0"})
    write_safetensors(new, specs, after, {"format": "pt", "step": str(steps)})


def finetune_pair(
    old: Path, new: Path, specs: Sequence[Spec], trained: Sequence[str], seed: int = 0
) -> None:
    """fp32 checkpoints where only the ``trained`` tensors changed (all their elements)."""

    def before(name: str) -> npt.NDArray[np.generic]:
        shape = next(s for n, _, s in specs if n == name)
        return _master(name, shape, seed)

    def after(name: str) -> npt.NDArray[np.generic]:
        shape = next(s for n, _, s in specs if n == name)
        w = _master(name, shape, seed)
        if name in trained:
            rng = np.random.default_rng([seed + 2, *name.encode()])
            w = w + np.float32(1e-3) * rng.standard_normal(w.shape, dtype=np.float32)
        return w

    write_safetensors(old, specs, before, {"format": "pt"})
    write_safetensors(new, specs, after, {"format": "pt"})
