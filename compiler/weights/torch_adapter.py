"""Patch a live torch state dict in place from a delta (hot standby, no restart).

Only this module imports torch (the optional ``torch`` extra). Each tensor is
patched through a zero-copy uint8 numpy view of its CPU memory. Every source
tensor's hash is checked before the first write, and every patched tensor's
hash after.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from compiler.weights.deltafile import DeltaReader, TensorDelta, iter_chunks
from compiler.weights.encode import COPY, Decoder
from compiler.weights.errors import DeltaError
from compiler.weights.manifest import chunk_spans, h128, tensor_hash
from compiler.weights.safetensors_io import DTYPE_WIDTH, U8Array

try:
    import torch
except ImportError as exc:  # pragma: no cover - exercised only without the extra
    raise ImportError(
        "the torch adapter needs torch: pip install torch (standbyc's torch extra)"
    ) from exc

TORCH_DTYPES: dict[Any, str] = {
    torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32", torch.float64: "F64",
    torch.int8: "I8", torch.uint8: "U8", torch.int16: "I16", torch.int32: "I32",
    torch.int64: "I64", torch.bool: "BOOL",
    torch.float8_e4m3fn: "F8_E4M3", torch.float8_e5m2: "F8_E5M2",
}  # fmt: skip


def _bytes_of(t: Any) -> U8Array:
    """The tensor's memory as a writable uint8 numpy view (no copy)."""
    flat = t.detach().reshape(-1)
    if flat.data_ptr() != t.data_ptr() or not t.is_contiguous():
        raise DeltaError("tensor is not contiguous; cannot patch it in place")
    return flat.view(torch.uint8).numpy()  # type: ignore[no-any-return]


def _hash(data: U8Array, chunk: int) -> bytes:
    return tensor_hash([h128(data[lo:hi]) for lo, hi in chunk_spans(len(data), chunk)])


def apply_to_state_dict(state_dict: Mapping[str, Any], delta: Path) -> dict[str, int]:
    """Patch ``state_dict``'s CPU tensors in place; return counts of what was done."""
    reader = DeltaReader(delta)
    try:
        reader.verify_payload()
        hdr = reader.header
        views = {td.name: _check(state_dict, td, delta) for td in hdr.tensors}
        for td in hdr.tensors:  # every check before the first write
            if td.source is not None and _hash(views[td.name], hdr.chunk_size) != td.source.hash:
                raise DeltaError(
                    f"{delta}: tensor {td.name!r} in the state dict does not match the "
                    "delta's base (hash differs); nothing was patched"
                )
        dec = Decoder()
        counts = {"unchanged": 0, "patched": 0}
        with torch.no_grad():
            for td in hdr.tensors:
                arr = views[td.name]
                changed = False
                for lo, hi, op in iter_chunks(td, hdr.chunk_size):
                    if op is None or op.op == COPY:
                        continue
                    part = arr[lo:hi]
                    # old and out alias: every op reads an element before writing it.
                    dec.decode(op.op, payload=reader.section(op.offset, op.length),
                               params=op.params, old=part, out=part,
                               width=DTYPE_WIDTH[td.dtype],
                               where=f"{delta}: tensor {td.name!r} bytes [{lo}, {hi})")  # fmt: skip
                    changed = True
                if _hash(arr, hdr.chunk_size) != td.hash:
                    raise DeltaError(f"{delta}: tensor {td.name!r} hash mismatch after patching")
                counts["patched" if changed else "unchanged"] += 1
        return counts
    finally:
        reader.close()


def _check(state_dict: Mapping[str, Any], td: TensorDelta, delta: Path) -> U8Array:
    t = state_dict.get(td.name)
    if t is None:
        raise DeltaError(f"{delta}: tensor {td.name!r} is not in the state dict")
    if td.source is not None and td.source.name != td.name:
        raise DeltaError(
            f"{delta}: tensor {td.name!r} comes from {td.source.name!r}; a live state dict "
            "cannot rename tensors (restart from files instead)"
        )
    if t.device.type != "cpu":
        raise DeltaError(f"{delta}: tensor {td.name!r} is on {t.device}; only CPU is supported")
    dtype = TORCH_DTYPES.get(t.dtype)
    if dtype != td.dtype or tuple(t.shape) != td.shape:
        raise DeltaError(
            f"{delta}: tensor {td.name!r} is {dtype}{list(t.shape)} in the state dict, "
            f"the delta expects {td.dtype}{list(td.shape)}"
        )
    arr = _bytes_of(t)
    if len(arr) != td.nbytes:
        raise DeltaError(
            f"{delta}: tensor {td.name!r} holds {len(arr)} bytes, expected {td.nbytes}"
        )
    return np.asarray(arr)
