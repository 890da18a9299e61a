"""TRL's delta weight sync format, reproduced only to measure it beside standbyc's.

Per changed tensor: the int32 flat indices of the elements that changed and their new
values, stored as two tensors in one safetensors file. Applying it scatters the values
into a copy of the base. No compression, no hashes.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from compiler.weights.safetensors_io import UINT_OF_WIDTH, Checkpoint, SafetensorsFile
from compiler.weights.testing import write_safetensors


def _array(f: SafetensorsFile, name: str) -> np.ndarray[Any, Any]:
    t = next(t for t in f.tensors if t.name == name)
    return f.view(t.begin, t.end).view(UINT_OF_WIDTH[t.width])


def encode(old: Path, new: Path, out: Path) -> int:
    """Write the delta from OLD to NEW at ``out``; return its size in bytes."""
    a, b = Checkpoint(old), Checkpoint(new)
    try:
        patches: dict[str, np.ndarray[Any, Any]] = {}
        dtypes: dict[str, str] = {}
        for loc in b.tensors():
            t = loc.info
            cur = loc.file.view(t.begin, t.end).view(UINT_OF_WIDTH[t.width])
            base = a.by_name[t.name]
            prev = base.file.view(base.info.begin, base.info.end).view(UINT_OF_WIDTH[t.width])
            idx = np.flatnonzero(cur != prev).astype(np.int32)
            if idx.size:
                patches[f"{t.name}.indices"] = idx
                patches[f"{t.name}.values"] = cur[idx]
                dtypes[f"{t.name}.indices"] = "I32"
                dtypes[f"{t.name}.values"] = t.dtype
            loc.file.release(t.begin, t.end)
            base.file.release(base.info.begin, base.info.end)
        specs = [(n, dtypes[n], (int(v.size),)) for n, v in patches.items()]
        write_safetensors(out, specs, lambda n: patches[n], {"format": "trl-delta"})
    finally:
        a.close()
        b.close()
    return out.stat().st_size


def apply(base: Path, delta: Path, out: Path) -> None:
    """Rebuild NEW at ``out`` from BASE and the delta."""
    ckpt = Checkpoint(base)
    patch = SafetensorsFile(delta)
    names = {t.name for t in patch.tensors}
    try:
        specs = [(t.info.name, t.info.dtype, t.info.shape) for t in ckpt.tensors()]

        def tensor(name: str) -> np.ndarray[Any, Any]:
            loc = ckpt.by_name[name]
            data = loc.file.view(loc.info.begin, loc.info.end)
            arr = data.view(UINT_OF_WIDTH[loc.info.width]).copy()
            if f"{name}.indices" in names:
                arr[_array(patch, f"{name}.indices")] = _array(patch, f"{name}.values")
            loc.file.release(loc.info.begin, loc.info.end)
            return arr

        write_safetensors(out, specs, tensor, ckpt.files[0].metadata)
    finally:
        ckpt.close()
        patch.close()
