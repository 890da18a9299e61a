"""Per-chunk lossless encodings: copy, sparse patch, dense XOR, raw.

All work is on raw unsigned integers of the dtype's width. A chunk's encoding
is the smallest of the candidates actually produced. Candidates are skipped
when they cannot win (sparse beyond 1/(width+1) changed, raw below 1/2) or,
for dense XOR below 1/4 changed, when they lose by a wide margin: the sparse
form carries the same positions and XOR'd values, with the positions
gap-coded instead of left to zstd as runs of zeros. On RL-like bf16 updates
XOR was 38-75% larger than sparse below 25% changed (72 KB against 43 KB per
1 MiB chunk at 7.4%) and first matched it at 54%, while compressing it
doubled the time per chunk.
"""

from __future__ import annotations

import zlib
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import zstandard

from compiler.weights.errors import DeltaError
from compiler.weights.safetensors_io import UINT_OF_WIDTH, U8Array

COPY = "c"  # same bytes as the source chunk
SPARSE = "s"  # gap-encoded positions + XOR'd values, each zstd'd (older deltas)
SPARSE_PLANES = "sp"  # the same, each value byte plane a Huffman-only deflate stream
XOR = "x"  # dense XOR with the source, byte-shuffled, zstd'd
RAW_Z = "rz"  # the new bytes, byte-shuffled, zstd'd
RAW = "r"  # the new bytes, stored
OPS = (COPY, SPARSE, SPARSE_PLANES, XOR, RAW_Z, RAW)
# Relative ops patch the source chunk by XOR: decoded over a zero source they give the
# XOR mask, so two of them compose without either checkpoint. Absolute ops hold the new
# bytes themselves. Every op is one or the other.
RELATIVE_OPS = frozenset((COPY, SPARSE, SPARSE_PLANES, XOR))
ABSOLUTE_OPS = frozenset((RAW_Z, RAW))
assert frozenset(OPS) == RELATIVE_OPS | ABSOLUTE_OPS and not RELATIVE_OPS & ABSOLUTE_OPS
GAP_WIDTHS = (1, 2, 4, 8)

ZSTD_LEVEL = 1  # level 1 keeps diff above 1 GB/s; higher levels gain ~2% size
# zstd for a sparse chunk's streams uses its longest minimum match (7). XOR'd values are a few
# short symbols (0x01, 0x03, 0x07 ... for a one-ulp step) that repeat by chance, and the
# shortest matches cost more bits than the Huffman-coded literals they replace: 3.46 -> 3.35
# bits per changed bf16 value in the ``s`` op on the RL pair. Gaps are unaffected (6.99 bits).
SPARSE_MIN_MATCH = 7
# Even so, zstd leaves the values 0.6 bits above their order-0 entropy (2.76 bits). Deflate
# can skip matching altogether: Huffman-only coding of each value byte plane (run-length for
# planes that are mostly zero, such as the high bytes) comes within 0.2 bit of it: 1.31 ->
# 1.24 B per changed element on the RL pair. The gaps gain little from it (6.99 -> 6.93 bits,
# entropy 6.82) and stay with zstd, about four times faster here.
DEFLATE_MEM_LEVEL = 8  # 16 Ki symbols per block; level 9 only doubles the set-up time


@dataclass(frozen=True)
class Encoded:
    """One encoded chunk: op, payload, and op parameters stored in the header."""

    op: str
    payload: bytes
    params: tuple[int, ...] = ()


def shuffle(data: U8Array, width: int) -> U8Array:
    """Group byte k of every element together; zstd then sees each plane's statistics."""
    if width == 1:
        return data
    out = np.empty(len(data), dtype=np.uint8)
    planes, elems = out.reshape(width, -1), data.reshape(-1, width)
    # One strided copy per plane: ~5x faster than ascontiguousarray(transpose).
    for k in range(width):
        planes[k] = elems[:, k]
    return out


def unshuffle(data: U8Array, width: int) -> U8Array:
    if width == 1:
        return data
    out = np.empty(len(data), dtype=np.uint8)
    elems, planes = out.reshape(-1, width), data.reshape(width, -1)
    for k in range(width):
        elems[:, k] = planes[k]
    return out


class Encoder:
    """Encodes chunks; reuses zstd contexts and scratch buffers. ``close`` when done."""

    def __init__(self, chunk: int, level: int = ZSTD_LEVEL) -> None:
        self._z = zstandard.ZstdCompressor(level=level)
        sparse = zstandard.ZstdCompressionParameters.from_level(level, min_match=SPARSE_MIN_MATCH)
        self._z_sparse = zstandard.ZstdCompressor(compression_params=sparse)
        self._z_side = zstandard.ZstdCompressor(level=level)  # used by the side thread only
        self._side: ThreadPoolExecutor | None = None
        self._mask = np.empty(chunk, dtype=np.bool_)
        self._xor = np.empty(chunk, dtype=np.uint8)

    def close(self) -> None:
        if self._side is not None:
            self._side.shutdown(wait=True)
            self._side = None

    def _zc(self, data: U8Array | npt.NDArray[np.generic]) -> bytes:
        return self._z.compress(np.ascontiguousarray(data).view(np.uint8).data)

    def _zs(self, data: U8Array) -> bytes:
        return self._z_sparse.compress(data.data)

    def raw(self, new: U8Array, width: int) -> Encoded:
        return _raw(self._z, new, width)

    def delta(self, old: U8Array, new: U8Array, width: int) -> Encoded:
        """Smallest lossless encoding of ``new`` given ``old`` (same length)."""
        n = len(new)
        kind = UINT_OF_WIDTH[width]
        ow, nw = old.view(kind), new.view(kind)
        elems = len(nw)
        # A bool mask then nonzero is the fastest element scan numpy offers
        # (about 0.4 s/GiB); positions come out sorted, ready to gap-encode.
        mask = self._mask[:elems]
        np.not_equal(ow, nw, out=mask)
        idx = np.flatnonzero(mask)
        nnz = len(idx)
        if nnz == 0:
            return Encoded(COPY, b"")
        best: Encoded | None = None
        if nnz * (width + 1) < n:
            values = np.bitwise_xor(ow.take(idx), nw.take(idx))
            best = self._sparse_planes(idx, values, width)
        raw: Future[Encoded] | None = None
        if nnz * 2 > elems:
            # Dense change: compressing NEW as is competes with XOR. zstd releases the
            # GIL and is compute-bound, so the two compressions run side by side.
            if self._side is None:
                self._side = ThreadPoolExecutor(1, thread_name_prefix="standbyc-encode")
            raw = self._side.submit(_raw, self._z_side, new, width)
        if best is None or nnz * 4 > elems:
            x = self._xor[:n]
            np.bitwise_xor(old, new, out=x)
            cand = Encoded(XOR, self._zc(shuffle(x, width)))
            if best is None or len(cand.payload) < len(best.payload):
                best = cand
        if raw is not None:
            cand = raw.result()
            if len(cand.payload) < len(best.payload):
                best = cand
        return best

    def encode(self, op: str, old: U8Array, new: U8Array, width: int) -> Encoded:
        """``new`` given ``old`` in the named op, whether or not it is the smallest."""
        if op == COPY:
            if old.tobytes() != new.tobytes():
                raise ValueError("a copy chunk needs equal bytes")
            return Encoded(COPY, b"")
        if op in (SPARSE, SPARSE_PLANES):
            kind = UINT_OF_WIDTH[width]
            ow, nw = old.view(kind), new.view(kind)
            idx = np.flatnonzero(ow != nw)
            if not len(idx):
                raise ValueError("a sparse chunk needs a changed element")
            values = np.bitwise_xor(ow.take(idx), nw.take(idx))
            if op == SPARSE:
                return self._sparse(idx, values, width)
            return self._sparse_planes(idx, values, width)
        if op == XOR:
            return Encoded(XOR, self._zc(shuffle(np.bitwise_xor(old, new), width)))
        if op == RAW_Z:
            return Encoded(RAW_Z, self._zc(shuffle(new, width)))
        if op == RAW:
            return Encoded(RAW, new.tobytes())
        raise ValueError(f"unknown op {op!r}")

    def _sparse(
        self, idx: npt.NDArray[np.intp], values: npt.NDArray[np.generic], width: int
    ) -> Encoded:
        gw, gaps = _gaps(idx)
        g = self._zs(shuffle(gaps, gw))
        v = self._zs(shuffle(np.ascontiguousarray(values).view(np.uint8), width))
        return Encoded(SPARSE, g + v, (len(idx), gw, len(g)))

    def _sparse_planes(
        self, idx: npt.NDArray[np.intp], values: npt.NDArray[np.generic], width: int
    ) -> Encoded:
        gw, gaps = _gaps(idx)
        g = self._zs(shuffle(gaps, gw))
        planes = shuffle(np.ascontiguousarray(values).view(np.uint8), width).reshape(width, -1)
        payload = g + b"".join(map(_deflate, planes))
        return Encoded(SPARSE_PLANES, payload, (len(idx), gw, len(g)))


def _gaps(idx: npt.NDArray[np.intp]) -> tuple[int, U8Array]:
    """Gap width and the gaps between sorted, non-empty positions, as little-endian bytes."""
    gaps = np.empty_like(idx)
    gaps[0] = idx[0]
    np.subtract(idx[1:], idx[:-1], out=gaps[1:])
    gaps[1:] -= 1
    top = int(gaps.max())
    gw = next(w for w in GAP_WIDTHS if top < 1 << (8 * w))
    return gw, gaps.astype(UINT_OF_WIDTH[gw]).view(np.uint8)


def _deflate(plane: U8Array) -> bytes:
    """One byte plane as a raw deflate stream without string matching: Huffman codes only,
    or runs of one byte when the plane is mostly zero."""
    strategy = zlib.Z_RLE if 2 * np.count_nonzero(plane) < len(plane) else zlib.Z_HUFFMAN_ONLY
    z = zlib.compressobj(1, zlib.DEFLATED, -15, DEFLATE_MEM_LEVEL, strategy)
    return z.compress(plane.data) + z.flush()


def _raw(z: zstandard.ZstdCompressor, new: U8Array, width: int) -> Encoded:
    packed = z.compress(shuffle(new, width).data)
    if len(packed) < len(new):
        return Encoded(RAW_Z, packed)
    return Encoded(RAW, new.tobytes())


class Decoder:
    """Decodes chunks into caller-owned buffers, trusting no length it reads."""

    def __init__(self) -> None:
        self._z = zstandard.ZstdDecompressor()

    def unzstd(self, frame: bytes | memoryview, expected: int, where: str) -> U8Array:
        try:
            size = zstandard.frame_content_size(frame)
        except zstandard.ZstdError as exc:
            raise DeltaError(f"{where}: corrupt zstd frame: {exc}") from None
        if size != expected:
            raise DeltaError(f"{where}: zstd frame declares {size} bytes, expected {expected}")
        try:
            out = self._z.decompress(frame, max_output_size=expected)
        except zstandard.ZstdError as exc:
            raise DeltaError(f"{where}: corrupt zstd frame: {exc}") from None
        if len(out) != expected:
            raise DeltaError(f"{where}: zstd frame holds {len(out)} bytes, expected {expected}")
        return np.frombuffer(out, dtype=np.uint8)

    def decode(
        self,
        op: str,
        *,
        payload: memoryview,
        params: tuple[int, ...],
        old: U8Array | None,
        out: U8Array,
        width: int,
        where: str,
    ) -> None:
        """Write the chunk's new bytes into ``out`` (whose length is the chunk size)."""
        n = len(out)
        if op in RELATIVE_OPS and (old is None or len(old) != n):
            raise DeltaError(f"{where}: op {op!r} needs a source chunk of {n} bytes")
        if op == RAW:
            if len(payload) != n:
                raise DeltaError(f"{where}: raw chunk holds {len(payload)} bytes, expected {n}")
            out[:] = np.frombuffer(payload, dtype=np.uint8)
        elif op == RAW_Z:
            out[:] = unshuffle(self.unzstd(payload, n, where), width)
        elif op == COPY:
            assert old is not None
            if old is not out:  # apply reads the source chunk straight into ``out``
                out[:] = old
        elif op == XOR:
            assert old is not None
            np.bitwise_xor(old, unshuffle(self.unzstd(payload, n, where), width), out=out)
        elif op in (SPARSE, SPARSE_PLANES):
            assert old is not None
            if old is not out:
                out[:] = old
            if op == SPARSE:
                self._patch(payload, params, out, width, where)
            else:
                self._patch_planes(payload, params, out, width, where)
        else:
            raise DeltaError(f"{where}: unknown op {op!r}")

    def _patch(
        self, payload: memoryview, params: tuple[int, ...], out: U8Array, width: int, where: str
    ) -> None:
        count, gw, glen = params
        elems = len(out) // width
        if not 0 < count <= elems or gw not in GAP_WIDTHS or not 0 < glen < len(payload):
            raise DeltaError(f"{where}: bad sparse parameters {list(params)}")
        gaps = unshuffle(self.unzstd(payload[:glen], count * gw, where), gw)
        vals = unshuffle(self.unzstd(payload[glen:], count * width, where), width)
        _scatter(gaps, vals, out, gw=gw, width=width, where=where)

    def _patch_planes(
        self, payload: memoryview, params: tuple[int, ...], out: U8Array, width: int, where: str
    ) -> None:
        count, gw, glen = params
        if (
            not 0 < count <= len(out) // width
            or gw not in GAP_WIDTHS
            or not 0 < glen < len(payload)
        ):
            raise DeltaError(f"{where}: bad sparse parameters {list(params)}")
        gaps = unshuffle(self.unzstd(payload[:glen], count * gw, where), gw)
        vals = unshuffle(inflate_planes(payload[glen:], count, width, where), width)
        _scatter(gaps, vals, out, gw=gw, width=width, where=where)


def inflate_planes(payload: memoryview, count: int, planes: int, where: str) -> U8Array:
    """``planes`` raw deflate streams back to back, each exactly ``count`` bytes, filling
    the payload exactly; never inflates past what the op implies."""
    out = np.empty(count * planes, dtype=np.uint8)
    rest: bytes | memoryview = payload
    for k in range(planes):
        z = zlib.decompressobj(-15)
        try:
            got = z.decompress(rest, count)
            # The end-of-stream code may follow the last byte: read it, and nothing more.
            more = z.decompress(z.unconsumed_tail, 1) if not z.eof else b""
        except zlib.error as exc:
            raise DeltaError(f"{where}: corrupt deflate stream {k}: {exc}") from None
        if len(got) != count or more or not z.eof:
            raise DeltaError(f"{where}: deflate stream {k} does not hold exactly {count} bytes")
        out[k * count : (k + 1) * count] = np.frombuffer(got, dtype=np.uint8)
        rest = z.unused_data
    if len(rest):
        raise DeltaError(f"{where}: {len(rest)} bytes after the last deflate stream")
    return out


def _scatter(
    gaps: U8Array, vals: U8Array, out: U8Array, *, gw: int, width: int, where: str
) -> None:
    """XOR ``vals`` into ``out`` at the positions the gaps give, each checked first."""
    elems = len(out) // width
    g = gaps.view(UINT_OF_WIDTH[gw])
    # Bound every gap before the cumulative sum so it cannot overflow.
    if int(g.max()) >= elems:
        raise DeltaError(f"{where}: sparse position out of range")
    idx = np.cumsum(g.astype(np.int64) + 1) - 1
    if int(idx[-1]) >= elems:
        raise DeltaError(
            f"{where}: sparse position {int(idx[-1])} out of range for {elems} elements"
        )
    target = out.view(UINT_OF_WIDTH[width])
    target[idx] ^= vals.view(UINT_OF_WIDTH[width])
