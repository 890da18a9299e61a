"""Byte-exact delta format for a tiny pair (docs/delta-format.md)."""

from __future__ import annotations

import zlib
from pathlib import Path

import numpy as np
import pytest
import xxhash
import zstandard

from compiler.weights.apply import apply
from compiler.weights.deltafile import PREAMBLE
from compiler.weights.diff import diff
from compiler.weights.testing import write_safetensors

HEADER = (
    b'{"base":{"digest":"d212f3b7b943bd29b9b64153db50faac","size":260},"chunk_size":4096,'
    b'"format":"standbyc-weights-delta","target":{"digest":"0bca91bd78d9c53af462bfc443e21b38",'
    b'"files":[{"header":{"len":98,"size":128},"header_xxh128":"eddc77cd387f1d09a6f9c06f09f42006",'
    b'"name":"","size":260,"tensors":["a","c"]}],"index":null,"sharded":false,"size":260},'
    b'"tensors":[{"chunks":[["sp",16,1,1,10]],"dtype":"BF16","name":"a","nbytes":128,"shape":[64],'
    b'"source":{"name":"a","nbytes":128,"xxh128":"624efdb6446b9f5e130261873ecf4804"},'
    b'"xxh128":"842d3340148eadbb0e866d847e28246a"},{"chunks":"copy","dtype":"U8","name":"c",'
    b'"nbytes":4,"shape":[4],"source":{"name":"b","nbytes":4,'
    b'"xxh128":"4c22d85cc2c598a4eae41a7cd6f549a9"},"xxh128":"4c22d85cc2c598a4eae41a7cd6f549a9"}],'
    b'"version":1}'
)

# The same delta as written before the "sp" op: its one sparse chunk zstd'd ("s").
LEGACY_HEADER = (
    b'{"base":{"digest":"d212f3b7b943bd29b9b64153db50faac","size":260},"chunk_size":4096,'
    b'"format":"standbyc-weights-delta","target":{"digest":"0bca91bd78d9c53af462bfc443e21b38",'
    b'"files":[{"header":{"len":98,"size":128},"header_xxh128":"eddc77cd387f1d09a6f9c06f09f42006",'
    b'"name":"","size":260,"tensors":["a","c"]}],"index":null,"sharded":false,"size":260},'
    b'"tensors":[{"chunks":[["s",21,1,1,10]],"dtype":"BF16","name":"a","nbytes":128,"shape":[64],'
    b'"source":{"name":"a","nbytes":128,"xxh128":"624efdb6446b9f5e130261873ecf4804"},'
    b'"xxh128":"842d3340148eadbb0e866d847e28246a"},{"chunks":"copy","dtype":"U8","name":"c",'
    b'"nbytes":4,"shape":[4],"source":{"name":"b","nbytes":4,'
    b'"xxh128":"4c22d85cc2c598a4eae41a7cd6f549a9"},"xxh128":"4c22d85cc2c598a4eae41a7cd6f549a9"}],'
    b'"version":1}'
)


def tiny_pair(d: Path) -> tuple[Path, Path]:
    """BF16 'a' with one element changed (40: 40 -> 0x1234); U8 'b' renamed to 'c'."""
    old = {"a": np.arange(64, dtype=np.uint16), "b": np.zeros(4, np.uint8)}
    new = {"a": np.where(np.arange(64) == 40, 0x1234, np.arange(64)).astype(np.uint16),
           "c": np.zeros(4, np.uint8)}  # fmt: skip
    write_safetensors(d / "old", [("a", "BF16", (64,)), ("b", "U8", (4,))], lambda n: old[n])
    write_safetensors(d / "new", [("a", "BF16", (64,)), ("c", "U8", (4,))], lambda n: new[n])
    return d / "old", d / "new"


@pytest.fixture
def tiny(tmp_path: Path) -> tuple[Path, Path, bytes]:
    old, new = tiny_pair(tmp_path)
    diff(new, tmp_path / "delta", old_path=old, chunk=4096)
    return old, new, (tmp_path / "delta").read_bytes()


def test_tiny_delta_is_byte_exact(tiny: tuple[Path, Path, bytes]) -> None:
    _, _, raw = tiny
    magic, version, reserved, flags, hlen, plen, hhash, phash = PREAMBLE.unpack(raw[:64])
    assert (magic, version, reserved, flags) == (b"SBYDELTA", 1, 0, 0)
    assert raw[64 : 64 + hlen] == HEADER
    assert (hlen, plen, len(raw)) == (len(HEADER), 114, 64 + len(HEADER) + 114)
    assert hhash == xxhash.xxh3_128_digest(HEADER)
    payload = raw[64 + hlen :]
    assert phash == xxhash.xxh3_128_digest(payload)
    # Payload order: the target's safetensors prefix (98 bytes), then a's sparse chunk.
    z = zstandard.ZstdDecompressor()
    prefix = z.decompress(payload[:98])
    assert prefix[:8] == (120).to_bytes(8, "little") and prefix[8:9] == b"{"
    sparse = payload[98:]
    assert sparse == bytes.fromhex("28b52ffd200109000028930100130200")
    assert z.decompress(sparse[:10]) == bytes([40])  # one gap of 40 (uint8)
    # XOR of 40 and 0x1234 is 0x121C: its low, then its high byte, each a raw deflate stream.
    planes = []
    for k in range(2):
        d = zlib.decompressobj(-15)
        planes.append(d.decompress(sparse[10 + 3 * k : 13 + 3 * k]))
        assert d.eof and not d.unused_data
    assert planes == [bytes([0x1C]), bytes([0x12])]


def test_tiny_delta_applies(tiny: tuple[Path, Path, bytes], tmp_path: Path) -> None:
    old, new, _ = tiny
    apply(old, tmp_path / "delta", tmp_path / "out")
    assert (tmp_path / "out").read_bytes() == new.read_bytes()


def test_a_delta_written_with_the_zstd_sparse_op_still_applies(tmp_path: Path) -> None:
    old, new = tiny_pair(tmp_path)
    prefix = new.read_bytes()[:128]
    payload = zstandard.ZstdCompressor(level=3).compress(prefix)
    z1 = zstandard.ZstdCompressor(level=1)
    payload += z1.compress(bytes([40])) + z1.compress(bytes([0x1C, 0x12]))
    assert len(payload) == 98 + 21
    pre = PREAMBLE.pack(b"SBYDELTA", 1, 0, 0, len(LEGACY_HEADER), len(payload),
                        xxhash.xxh3_128_digest(LEGACY_HEADER),
                        xxhash.xxh3_128_digest(payload))  # fmt: skip
    (tmp_path / "delta").write_bytes(pre + LEGACY_HEADER + payload)
    apply(old, tmp_path / "delta", tmp_path / "out")
    assert (tmp_path / "out").read_bytes() == new.read_bytes()
