"""Patching a live state dict in place (hot standby) from a delta."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from compiler.weights.diff import diff
from compiler.weights.errors import DeltaError
from tests.conftest import import_torch
from tests.weights.conftest import Pair

torch = import_torch()
st = pytest.importorskip("safetensors.torch")
from compiler.weights.torch_adapter import apply_to_state_dict  # noqa: E402 (needs torch)


def _same(a: dict[str, object], b: dict[str, object]) -> bool:
    return all(torch.equal(a[k].view(torch.uint8), b[k].view(torch.uint8)) for k in b)


@pytest.mark.parametrize("name", ["torch_rl_bf16", "torch_finetune_fp32"])
def test_patches_live_tensors_in_place(
    name: str, torch_pairs: dict[str, Pair], tmp_path: Path
) -> None:
    p = torch_pairs[name]
    delta = tmp_path / "d.delta"
    diff(p.new, delta, old_path=p.old)
    live = st.load_file(str(p.old))
    ptrs = {k: v.data_ptr() for k, v in live.items()}
    counts = apply_to_state_dict(live, delta)
    assert _same(live, st.load_file(str(p.new)))
    assert {k: v.data_ptr() for k, v in live.items()} == ptrs  # same memory, patched in place
    assert counts["patched"] > 0


def test_patches_a_model_without_restart(torch_pairs: dict[str, Pair], tmp_path: Path) -> None:
    p = torch_pairs["torch_finetune_fp32"]
    delta = tmp_path / "d.delta"
    diff(p.new, delta, old_path=p.old)
    model = torch.nn.Module()
    for k, v in st.load_file(str(p.old)).items():
        model.register_buffer(k.replace(".", "_"), v)
    sd = {k: getattr(model, k.replace(".", "_")) for k in st.load_file(str(p.old))}
    apply_to_state_dict(sd, delta)
    assert _same(sd, st.load_file(str(p.new)))


def test_wrong_base_patches_nothing(torch_pairs: dict[str, Pair], tmp_path: Path) -> None:
    p = torch_pairs["torch_rl_bf16"]
    delta = tmp_path / "d.delta"
    diff(p.new, delta, old_path=p.old)
    live = st.load_file(str(p.new))  # already at the target: the base hash differs
    with pytest.raises(
        DeltaError,
        match=re.escape("does not match the delta's base (hash differs); nothing was patched"),
    ):
        apply_to_state_dict(live, delta)
    assert _same(live, st.load_file(str(p.new)))


def test_refuses_renames(pairs: dict[str, Pair], tmp_path: Path) -> None:
    p = pairs["renamed_reshaped_retyped"]
    delta = tmp_path / "d.delta"
    diff(p.new, delta, old_path=p.old)
    live = {k: v.clone() for k, v in st.load_file(str(p.new)).items()}
    with pytest.raises(DeltaError, match="cannot rename tensors"):
        apply_to_state_dict(live, delta)
