"""Session-scoped checkpoint pairs, generated into a temp dir (never in git)."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import pytest

from compiler.weights.safetensors_io import INDEX_NAME, SafetensorsFile
from compiler.weights.testing import (
    finetune_pair,
    rl_pair,
    to_bf16,
    transformer_specs,
    write_safetensors,
)
from tests.conftest import import_torch


class Pair(NamedTuple):
    old: Path
    new: Path


def sha256(path: Path) -> str:
    """sha256 of a file, or of a directory's files (name + content, sorted)."""
    h = hashlib.sha256()
    if path.is_dir():
        for p in sorted(path.iterdir()):
            h.update(p.name.encode() + b"\0" + hashlib.sha256(p.read_bytes()).digest())
    else:
        h.update(path.read_bytes())
    return h.hexdigest()


VOCAB = 2048
SPECS = transformer_specs(layers=2, hidden=256, vocab=4000)


def _tensors(path: Path) -> dict[str, tuple[str, tuple[int, ...], np.ndarray[Any, Any]]]:
    f = SafetensorsFile(path)
    out = {t.name: (t.dtype, t.shape, f.view(t.begin, t.end).copy()) for t in f.tensors}
    f.close()
    return out


def _write(
    path: Path,
    tensors: dict[str, tuple[str, tuple[int, ...], Any]],
    metadata: dict[str, str] | None = None,
) -> None:
    specs = [(n, d, s) for n, (d, s, _) in tensors.items()]
    write_safetensors(path, specs, lambda n: tensors[n][2], metadata)


def shard(src: Path, out: Path, n: int) -> None:
    """Split a single-file checkpoint into ``n`` shards plus an index."""
    ts = _tensors(src)
    out.mkdir()
    names = list(ts)
    weight_map = {}
    for i in range(n):
        part = names[i::n]
        fname = f"model-{i + 1:05d}-of-{n:05d}.safetensors"
        _write(out / fname, {k: ts[k] for k in part})
        weight_map.update(dict.fromkeys(part, fname))
    (out / INDEX_NAME).write_text(
        json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}, indent=2)
    )


@pytest.fixture(scope="session")
def pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Pair]:
    d = tmp_path_factory.mktemp("pairs")
    out: dict[str, Pair] = {}

    def pair(name: str) -> Pair:
        (d / name).mkdir()
        p = Pair(d / name / "old.safetensors", d / name / "new.safetensors")
        out[name] = p
        return p

    p = pair("rl_bf16")
    rl_pair(p.old, p.new, SPECS, lr=5e-7, steps=1)
    p = pair("finetune_fp32")
    fp32 = transformer_specs(layers=2, hidden=64, vocab=500, dtype="F32")
    finetune_pair(p.old, p.new, fp32, trained=["layers.1.mlp.up.weight", "layers.1.norm.weight"])

    base = _tensors(out["rl_bf16"].old)
    rng = np.random.default_rng(7)

    p = pair("nothing_changed")
    shutil.copyfile(out["rl_bf16"].old, p.old)
    shutil.copyfile(out["rl_bf16"].old, p.new)

    p = pair("all_changed")
    shutil.copyfile(out["rl_bf16"].old, p.old)
    _write(
        p.new,
        {
            k: (dt, s, rng.integers(0, 256, a.size, dtype=np.uint8))
            for k, (dt, s, a) in base.items()
        },
    )

    p = pair("tensor_added")
    shutil.copyfile(out["rl_bf16"].old, p.old)
    _write(
        p.new,
        base
        | {
            "lm_head.extra": ("BF16", (64, 128), rng.integers(0, 256, 64 * 128 * 2, dtype=np.uint8))
        },
    )

    p = pair("tensor_removed")
    shutil.copyfile(out["rl_bf16"].old, p.old)
    _write(p.new, {k: v for k, v in base.items() if k != "layers.1.mlp.up.weight"})

    p = pair("swapped")  # same names and shapes, contents traded between two tensors
    shutil.copyfile(out["rl_bf16"].old, p.old)
    a, b = "layers.0.attn.out.weight", "layers.1.attn.out.weight"
    _write(p.new, base | {a: base[b], b: base[a]})

    p = pair("renamed_reshaped_retyped")
    shutil.copyfile(out["rl_bf16"].old, p.old)
    moved = dict(base)
    moved["blocks.0.attn.qkv.weight"] = moved.pop("layers.0.attn.qkv.weight")
    dt, s, a = moved["layers.0.attn.out.weight"]
    moved["layers.0.attn.out.weight"] = (dt, (s[0] * s[1],), a)
    dt, s, a = moved["layers.1.attn.out.weight"]
    moved["layers.1.attn.out.weight"] = ("F16", s, a)
    _write(p.new, moved, {"format": "pt", "note": "metadata changed"})

    (d / "sharded").mkdir()
    p = Pair(d / "sharded" / "old", d / "sharded" / "new")
    out["sharded"] = p
    shard(out["rl_bf16"].old, p.old, 3)
    shard(out["rl_bf16"].new, p.new, 3)

    p = Pair(d / "sharded" / "old", d / "sharded" / "new_two_shards")
    out["shard_layout_changed"] = p
    shard(out["rl_bf16"].new, p.new, 2)

    p = Pair(out["rl_bf16"].old, d / "sharded" / "new")
    out["single_to_sharded"] = p
    return out


@pytest.fixture(scope="session")
def torch_pairs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Pair]:
    """Real training with torch on CPU: a tiny transformer, Adam at a small LR."""
    torch = import_torch()
    from safetensors.torch import save_file  # noqa: PLC0415 (needs torch, imported above)

    d = tmp_path_factory.mktemp("torch_pairs")
    torch.manual_seed(0)

    class Tiny(torch.nn.Module):  # type: ignore[name-defined,misc]
        def __init__(self, vocab: int = VOCAB, dim: int = 256) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(vocab, dim)
            self.blocks = torch.nn.ModuleList(
                torch.nn.TransformerEncoderLayer(dim, 4, 4 * dim, dropout=0.0, batch_first=True)
                for _ in range(2)
            )
            self.head = torch.nn.Linear(dim, vocab, bias=False)

        def forward(self, x: Any) -> Any:
            h = self.embed(x)
            for b in self.blocks:
                h = b(h)
            return self.head(h)

    def train(model: Any, params: Any, lr: float, steps: int) -> None:
        opt = torch.optim.Adam(params, lr=lr)
        for _ in range(steps):
            x = torch.randint(0, VOCAB, (8, 33))
            logits = model(x[:, :-1])
            loss = torch.nn.functional.cross_entropy(
                logits.reshape(-1, VOCAB), x[:, 1:].reshape(-1)
            )
            opt.zero_grad()
            loss.backward()
            opt.step()

    def save(model: Any, path: Path, dtype: Any) -> None:
        save_file(
            {k: v.detach().to(dtype).contiguous() for k, v in model.state_dict().items()},
            str(path),
            metadata={"format": "pt"},
        )

    out: dict[str, Pair] = {}
    m = Tiny()
    (d / "rl").mkdir()
    out["torch_rl_bf16"] = Pair(d / "rl" / "old.safetensors", d / "rl" / "new.safetensors")
    save(m, out["torch_rl_bf16"].old, torch.bfloat16)
    train(m, m.parameters(), lr=1e-6, steps=2)  # fp32 masters, saved as bf16
    save(m, out["torch_rl_bf16"].new, torch.bfloat16)

    m = Tiny()
    (d / "ft").mkdir()
    out["torch_finetune_fp32"] = Pair(d / "ft" / "old.safetensors", d / "ft" / "new.safetensors")
    save(m, out["torch_finetune_fp32"].old, torch.float32)
    train(m, m.blocks[1].parameters(), lr=1e-4, steps=3)  # only the last block trains
    save(m, out["torch_finetune_fp32"].new, torch.float32)
    return out


__all__ = ["Pair", "sha256", "to_bf16"]
