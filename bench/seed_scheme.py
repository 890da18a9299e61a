"""The seed's weight sync, reproduced only to measure it: md5 per whole tensor,
then ``pickle.dumps`` of every changed tensor.

Never use this outside the benchmark: unpickling received data runs arbitrary
code (facts.md, "What the seed gets wrong"). We only *dump* here, into a byte
counter, to get the exact number of bytes the seed would have sent.
"""

from __future__ import annotations

import hashlib
import pickle
from pathlib import Path
from typing import Any

import numpy as np

from compiler.weights.safetensors_io import UINT_OF_WIDTH, Checkpoint


class _Count:
    def __init__(self) -> None:
        self.n = 0

    def write(self, b: bytes) -> int:
        self.n += len(memoryview(b).cast("B"))
        return len(b)


def _md5s(ckpt: Checkpoint) -> dict[str, str]:
    out = {}
    for loc in ckpt.tensors():
        t = loc.info
        out[t.name] = hashlib.md5(loc.file.view(t.begin, t.end)).hexdigest()
        loc.file.release(t.begin, t.end)
    return out


def dump_changed(old: Path, new: Path, sink: Any) -> None:
    """What the seed's sender does: md5 of every tensor of both checkpoints, then
    ``pickle.dump`` of ``{name: tensor}`` for the tensors whose md5 changed, into ``sink``."""
    a, b = Checkpoint(old), Checkpoint(new)
    try:
        before, after = _md5s(a), _md5s(b)
        changed = [n for n, h in after.items() if before.get(n) != h]
        pickler = pickle.Pickler(sink, protocol=pickle.DEFAULT_PROTOCOL)
        payload = {}
        for name in changed:
            loc = b.by_name[name]
            t = loc.info
            arr = loc.file.view(t.begin, t.end).view(UINT_OF_WIDTH[t.width]).reshape(t.shape)
            payload[name] = np.asarray(arr)
        pickler.dump(payload)
    finally:
        a.close()
        b.close()


def seed_bytes(old: Path, new: Path) -> int:
    """Bytes the seed's scheme sends to bring OLD up to NEW."""
    sink = _Count()
    dump_changed(old, new, sink)
    return sink.n
