"""Byte patches for the files of a model directory that are not its weights.

A patch is a zstd frame of the new file compressed with the old file as a raw-content
dictionary (what ``zstd --patch-from`` does), so an edited ``tokenizer.json`` travels as
the bytes that changed. Both files must fit in memory: patches are made only for files
up to ``PATCH_CAP``; a larger file that changed travels whole.
"""

from __future__ import annotations

import io

import zstandard

from compiler.weights.errors import WeightsError

PATCH_CAP = 256 << 20
_LEVEL = 12


def _params(old: int, new: int) -> zstandard.ZstdCompressionParameters:
    # The window must reach back over the whole dictionary.
    window = max(20, min(31, (old + new).bit_length()))
    return zstandard.ZstdCompressionParameters.from_level(
        _LEVEL, window_log=window, enable_ldm=True
    )


def make_patch(old: bytes, new: bytes) -> bytes:
    """A patch that turns ``old`` into ``new``."""
    base = zstandard.ZstdCompressionDict(old, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    cctx = zstandard.ZstdCompressor(dict_data=base, compression_params=_params(len(old), len(new)))
    return cctx.compress(new)


def apply_patch(old: bytes, patch: bytes, size: int, where: str) -> bytes:
    """``old`` patched; at most ``size`` bytes come out, and exactly that many must."""
    base = zstandard.ZstdCompressionDict(old, dict_type=zstandard.DICT_TYPE_RAWCONTENT)
    dctx = zstandard.ZstdDecompressor(dict_data=base, max_window_size=1 << 31)
    try:
        # A stream, read to one byte past the size: the frame's own size claim is not
        # trusted to bound memory.
        with dctx.stream_reader(io.BytesIO(patch)) as reader:
            out = reader.read(size + 1)
    except zstandard.ZstdError as exc:
        raise WeightsError(f"{where}: not a patch for this base: {exc}") from None
    if len(out) != size:
        raise WeightsError(f"{where}: the patch gives {len(out)} bytes, expected {size}")
    return out
