"""Every chunk encoding decodes back to the new bytes, across change densities and widths."""

from __future__ import annotations

import contextlib
import zlib

import numpy as np
import pytest
import zstandard
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler.weights.encode import (
    ABSOLUTE_OPS,
    COPY,
    OPS,
    RAW,
    RAW_Z,
    RELATIVE_OPS,
    SPARSE,
    SPARSE_PLANES,
    XOR,
    Decoder,
    Encoded,
    Encoder,
)
from compiler.weights.errors import DeltaError
from compiler.weights.testing import _master, adam_like_step, to_bf16

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


def real_pair(dtype: str, n: int = CHUNK) -> tuple[np.ndarray, np.ndarray, int]:
    """``n`` bytes of weights before and after a small optimizer step, as stored."""
    rng = np.random.default_rng(7)
    w = _master("layers.0.mlp.up.weight", (n // 2,), 0)
    if dtype == "BF16":
        old, new = to_bf16(w), to_bf16(adam_like_step(w, 5e-7, 1, rng))
    elif dtype == "F16":
        old, new = w.astype(np.float16), adam_like_step(w, 2e-5, 1, rng).astype(np.float16)
    elif dtype == "F32":
        old, new = w, w + np.float32(1e-3) * rng.standard_normal(w.shape, dtype=np.float32)
    else:  # I32 counters, a few of them bumped
        old = rng.integers(0, 1 << 20, n // 2, dtype=np.int32)
        new = old + (rng.random(len(old)) < 0.03).astype(np.int32)
    a = np.ascontiguousarray(old).view(np.uint8)[:n]
    b = np.ascontiguousarray(new).view(np.uint8)[:n]
    return a, b, old.dtype.itemsize


def decode(e: Encoded, old: np.ndarray, width: int) -> np.ndarray:
    out = np.empty(len(old), dtype=np.uint8)
    Decoder().decode(e.op, payload=memoryview(e.payload), params=e.params, old=old, out=out,
                     width=width, where="test")  # fmt: skip
    return out


def encoded(old: np.ndarray, new: np.ndarray, width: int, op: str | None = None) -> Encoded:
    enc = Encoder(len(old))
    try:
        return enc.delta(old, new, width) if op is None else enc.encode(op, old, new, width)
    finally:
        enc.close()


def test_every_op_is_relative_or_absolute() -> None:
    assert set(OPS) == RELATIVE_OPS | ABSOLUTE_OPS and not RELATIVE_OPS & ABSOLUTE_OPS
    assert SPARSE_PLANES in RELATIVE_OPS


@pytest.mark.parametrize("dtype", ["BF16", "F16", "F32", "I32"])
@pytest.mark.parametrize("op", [SPARSE, SPARSE_PLANES, XOR, RAW_Z, RAW])
def test_every_op_round_trips_on_real_weights(dtype: str, op: str) -> None:
    old, new, width = real_pair(dtype)
    assert np.count_nonzero(old != new) > 0
    e = encoded(old, new, width, op)
    assert e.op == op
    assert decode(e, old.copy(), width).tobytes() == new.tobytes()
    if op in RELATIVE_OPS:  # over a zero source a relative op yields the XOR mask
        mask = decode(e, np.zeros_like(old), width)
        assert mask.tobytes() == np.bitwise_xor(old, new).tobytes()


def test_the_encoder_picks_sparse_planes_on_an_rl_step() -> None:
    old, new, width = real_pair("BF16", 1 << 20)  # one default-sized chunk
    e = encoded(old, new, width)
    assert e.op == SPARSE_PLANES
    zstd_sparse = encoded(old, new, width, SPARSE)
    count = e.params[0]
    # Measured here: 1.24 B per changed element against 1.30 B for the zstd'd sparse op.
    assert len(e.payload) / count < 1.27
    assert len(e.payload) < 0.97 * len(zstd_sparse.payload)


@pytest.mark.parametrize("width", [1, 2, 4, 8])
@pytest.mark.parametrize("density", [0.0, 0.001, 0.024, 0.074, 0.3, 0.6, 1.0])
def test_every_density_round_trips(width: int, density: float) -> None:
    old, new = changed(width, density, seed=int(density * 1000) + width)
    e = encoded(old, new, width)
    if density == 0.0:
        assert e.op == COPY
        return
    assert e.op in (SPARSE_PLANES, XOR, RAW_Z, RAW)
    if density < 0.25:
        assert e.op == SPARSE_PLANES  # XOR is not even tried below 1/4 changed
    assert decode(e, old, width).tobytes() == new.tobytes()


def test_a_random_rewrite_is_stored_raw() -> None:
    rng = np.random.default_rng(5)
    old = rng.integers(0, 256, CHUNK, dtype=np.uint8)
    new = rng.integers(0, 256, CHUNK, dtype=np.uint8)
    e = encoded(old, new, 2)
    assert e.op == RAW and e.payload == new.tobytes()


def _payload(gaps: bytes, planes: list[bytes]) -> tuple[bytes, int]:
    """A sparse-planes payload by hand: zstd'd gaps, then one raw deflate stream per plane."""
    g = zstandard.ZstdCompressor(level=1).compress(gaps)
    out = g
    for p in planes:
        z = zlib.compressobj(1, zlib.DEFLATED, -15)
        out += z.compress(p) + z.flush()
    return out, len(g)


GOOD = _payload(b"\x03\x00", [b"\x01\x02", b"\x00\x80"])


@pytest.mark.parametrize(
    ("payload", "params", "message"),
    [
        (_payload(b"\x03\x00", [b"\x01\x02"]), (2, 1),
         "deflate stream 1 does not hold exactly 2 bytes"),
        (_payload(b"\x03\x00", [b"\x01\x02", b"\x00"]), (2, 1),
         "deflate stream 1 does not hold exactly 2 bytes"),
        (_payload(b"\x03\x00", [b"\x01\x02\x07", b"\x00\x80"]), (2, 1),
         "deflate stream 0 does not hold exactly 2 bytes"),
        ((GOOD[0] + b"\x00", GOOD[1]), (2, 1), "1 bytes after the last deflate stream"),
        ((GOOD[0][: GOOD[1]] + b"\xff" * 12, GOOD[1]), (2, 1),
         "corrupt deflate stream 0: Error -3 while decompressing data: invalid block type"),
        (_payload(b"\x00\x3f", [b"\x01\x02", b"\x00\x80"]), (2, 1),
         "sparse position 64 out of range for 64 elements"),
        (_payload(b"\x00\x40", [b"\x01\x02", b"\x00\x80"]), (2, 1),
         "sparse position out of range"),
        (_payload(b"\x03\x00\x00", [b"\x01\x02", b"\x00\x80"]), (2, 1),
         "zstd frame declares 3 bytes, expected 2"),
        (GOOD, (0, 1), "bad sparse parameters [0, 1, {glen}]"),
        (GOOD, (65, 1), "bad sparse parameters [65, 1, {glen}]"),
        (GOOD, (2, 3), "bad sparse parameters [2, 3, {glen}]"),
    ],
)  # fmt: skip
def test_corrupt_sparse_planes_are_refused(
    payload: tuple[bytes, int], params: tuple[int, int], message: str
) -> None:
    data, glen = payload
    old = np.zeros(128, dtype=np.uint8)
    with pytest.raises(DeltaError) as err:
        Decoder().decode(SPARSE_PLANES, payload=memoryview(data), params=(*params, glen),
                         old=old, out=old.copy(), width=2, where="w")  # fmt: skip
    assert str(err.value) == f"w: {message.format(glen=glen)}"


def test_sparse_planes_byte_layout() -> None:
    """The gaps (uint8: 3, 0) as a zstd frame, then the values' low and high byte planes
    as one raw deflate stream each."""
    old = np.zeros(128, dtype=np.uint8)
    payload, glen = GOOD
    out = old.copy()
    Decoder().decode(SPARSE_PLANES, payload=memoryview(payload), params=(2, 1, glen), old=old,
                     out=out, width=2, where="w")  # fmt: skip
    elems = out.view(np.uint16)
    assert elems[3] == 0x0001 and elems[4] == 0x8002
    assert np.count_nonzero(elems) == 2


@settings(deadline=None, derandomize=True, max_examples=300)
@given(
    cut=st.integers(0, 40),
    flips=st.lists(st.tuples(st.integers(0, 10**6), st.integers(1, 255)), max_size=3),
    params=st.tuples(st.integers(0, 70), st.sampled_from([1, 2, 3, 4, 8]), st.integers(0, 40)),
)
def test_mutated_sparse_planes_decode_or_are_refused(
    cut: int, flips: list[tuple[int, int]], params: tuple[int, int, int]
) -> None:
    """A mutated payload or parameter list gives a clean DeltaError or bytes, never a crash."""
    data = bytearray(GOOD[0][: len(GOOD[0]) - cut] if cut < len(GOOD[0]) else b"")
    for at, bit in flips:
        if data:
            data[at % len(data)] ^= bit
    old = np.zeros(128, dtype=np.uint8)
    with contextlib.suppress(DeltaError):
        Decoder().decode(SPARSE_PLANES, payload=memoryview(bytes(data)), params=params,
                         old=old, out=old.copy(), width=2, where="w")  # fmt: skip
