"""Every chunk encoding decodes back to the new bytes, across change densities and widths."""

from __future__ import annotations

import numpy as np
import pytest

from compiler.weights.encode import COPY, RAW, RAW_Z, SPARSE, XOR, Decoder, Encoder

CHUNK = 1 << 16


def changed(width: int, density: float, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """OLD random; NEW with ``density`` of its elements flipped in their low bits."""
    rng = np.random.default_rng(seed)
    kind = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}[width]
    old = rng.integers(0, 256, CHUNK, dtype=np.uint8)
    new = old.copy()
    elems = new.view(kind)
    pos = rng.choice(len(elems), int(len(elems) * density), replace=False)
    elems[pos] ^= rng.integers(1, 8, len(pos)).astype(kind)
    return old, new


@pytest.mark.parametrize("width", [1, 2, 4, 8])
@pytest.mark.parametrize("density", [0.0, 0.001, 0.024, 0.074, 0.3, 0.6, 1.0])
def test_every_density_round_trips(width: int, density: float) -> None:
    old, new = changed(width, density, seed=int(density * 1000) + width)
    enc = Encoder(CHUNK)
    try:
        e = enc.delta(old, new, width)
    finally:
        enc.close()
    if density == 0.0:
        assert e.op == COPY
        return
    assert e.op in (SPARSE, XOR, RAW_Z, RAW)
    if density < 0.25:
        assert e.op == SPARSE  # XOR is not even tried below 1/4 changed
    out = np.empty(CHUNK, dtype=np.uint8)
    Decoder().decode(e.op, payload=memoryview(e.payload), params=e.params, old=old, out=out,
                     width=width, where="test")  # fmt: skip
    assert out.tobytes() == new.tobytes()


def test_a_random_rewrite_is_stored_raw() -> None:
    rng = np.random.default_rng(5)
    old = rng.integers(0, 256, CHUNK, dtype=np.uint8)
    new = rng.integers(0, 256, CHUNK, dtype=np.uint8)
    enc = Encoder(CHUNK)
    try:
        e = enc.delta(old, new, 2)
    finally:
        enc.close()
    assert e.op == RAW and e.payload == new.tobytes()
