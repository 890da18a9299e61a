"""Strict safetensors reader: our own header parser, data as mmap views.

We parse the header ourselves (8-byte LE length, JSON, contiguous offsets)
because the diff needs exact byte offsets and must refuse overlapping or
gappy files that ``safetensors`` itself may accept. Tensor data is never
copied: callers get ``numpy`` views into a read-only ``mmap`` and release
pages with ``MADV_DONTNEED`` once done, so RSS stays bounded.
"""

from __future__ import annotations

import contextlib
import json
import math
import mmap
import os
import stat
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from compiler.weights.errors import SafetensorsError, WeightsError

# The safetensors spec caps the header at 100 MB.
HEADER_CAP = 100_000_000
INDEX_NAME = "model.safetensors.index.json"
INDEX_CAP = 64 * 1024 * 1024
MAX_RANK = 64

# Every dtype is read as an unsigned integer of its width: a bitwise diff
# needs no float semantics, and numpy has no BF16/F8 anyway.
DTYPE_WIDTH: dict[str, int] = {
    "BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1,
    "U16": 2, "I16": 2, "F16": 2, "BF16": 2,
    "U32": 4, "I32": 4, "F32": 4,
    "U64": 8, "I64": 8, "F64": 8, "C64": 8,
}  # fmt: skip
UINT_OF_WIDTH: dict[int, type[np.unsignedinteger[Any]]] = {
    1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64,
}  # fmt: skip

U8Array = npt.NDArray[np.uint8]


@dataclass(frozen=True)
class TensorInfo:
    """One tensor as its header describes it; offsets are absolute in the file."""

    name: str
    dtype: str
    shape: tuple[int, ...]
    begin: int
    end: int

    @property
    def nbytes(self) -> int:
        return self.end - self.begin

    @property
    def width(self) -> int:
        return DTYPE_WIDTH[self.dtype]


def _no_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in pairs:
        if key in out:
            raise ValueError(f"duplicate key {key!r}")
        out[key] = value
    return out


def _is_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def parse_header(raw: bytes, data_len: int, where: str) -> tuple[list[TensorInfo], dict[str, str]]:
    """Validate a header's JSON; return tensors in data order and metadata.

    Offsets in the result are relative to the data start; ``data_len`` is the
    size of the data region, which the tensors must tile exactly.
    """
    try:
        doc = json.loads(raw.decode("utf-8"), object_pairs_hook=_no_duplicates)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise SafetensorsError(f"{where}: header is not valid JSON: {exc}") from None
    if not isinstance(doc, dict):
        raise SafetensorsError(f"{where}: header is not a JSON object")
    metadata: dict[str, str] = {}
    tensors: list[TensorInfo] = []
    for name, entry in doc.items():
        if name == "__metadata__":
            if not isinstance(entry, dict) or not all(isinstance(v, str) for v in entry.values()):
                raise SafetensorsError(f"{where}: __metadata__ must map strings to strings")
            metadata = dict(entry)
            continue
        tensors.append(_parse_entry(name, entry, where))
    tensors.sort(key=lambda t: (t.begin, t.end))
    pos = 0
    prev = "the start of the data"
    for t in tensors:
        if t.begin < pos:
            raise SafetensorsError(
                f"{where}: tensor {t.name!r}: data_offsets [{t.begin}, {t.end}] overlap "
                f"{prev} which ends at {pos}"
            )
        if t.begin > pos:
            raise SafetensorsError(
                f"{where}: tensor {t.name!r}: data_offsets [{t.begin}, {t.end}] leave a gap "
                f"of {t.begin - pos} bytes after {prev} which ends at {pos}"
            )
        pos = t.end
        prev = f"tensor {t.name!r}"
    if pos != data_len:
        raise SafetensorsError(
            f"{where}: tensors cover {pos} bytes of data but the file holds {data_len} bytes "
            "after the header"
        )
    return tensors, metadata


def _parse_entry(name: str, entry: object, where: str) -> TensorInfo:
    if not isinstance(entry, dict) or set(entry) != {"dtype", "shape", "data_offsets"}:
        raise SafetensorsError(
            f"{where}: tensor {name!r}: entry must have exactly dtype, shape and data_offsets"
        )
    dtype = entry["dtype"]
    if not isinstance(dtype, str) or dtype not in DTYPE_WIDTH:
        raise SafetensorsError(f"{where}: tensor {name!r}: unsupported dtype {dtype!r}")
    shape = entry["shape"]
    if (
        not isinstance(shape, list)
        or len(shape) > MAX_RANK
        or not all(_is_int(d) and d >= 0 for d in shape)
    ):
        raise SafetensorsError(
            f"{where}: tensor {name!r}: shape must be a list of non-negative integers"
        )
    offs = entry["data_offsets"]
    if (
        not (isinstance(offs, list) and len(offs) == 2 and all(_is_int(o) for o in offs))
        or not 0 <= offs[0] <= offs[1]
    ):
        raise SafetensorsError(
            f"{where}: tensor {name!r}: data_offsets must be [begin, end] with 0 <= begin <= end"
        )
    expected = math.prod(shape) * DTYPE_WIDTH[dtype]
    if offs[1] - offs[0] != expected:
        raise SafetensorsError(
            f"{where}: tensor {name!r}: data_offsets [{offs[0]}, {offs[1]}] span "
            f"{offs[1] - offs[0]} bytes but {dtype}{shape} needs {expected}"
        )
    return TensorInfo(name, dtype, tuple(shape), offs[0], offs[1])


def open_regular(path: Path, error: type[WeightsError], what: str) -> int:
    """Open ``path`` for reading, refusing anything but a regular file (a FIFO would block
    the open forever; O_NONBLOCK makes the open return so fstat can tell)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as exc:
        raise error(f"{path}: cannot open {what}: {exc.strerror}") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise error(f"{path}: not a regular file; a {what} must be one")
    return fd


class SafetensorsFile:
    """An open, validated safetensors file mapped read-only."""

    def __init__(self, path: Path, *, name: str | None = None) -> None:
        self.path = path
        self.name = name if name is not None else path.name
        where = str(path)
        fd = open_regular(path, SafetensorsError, "safetensors file")
        self._fd = -1
        try:
            size = os.fstat(fd).st_size
            if size < 8:
                raise SafetensorsError(
                    f"{where}: not a safetensors file: {size} bytes is shorter than the "
                    "8-byte header length"
                )
            (n,) = struct.unpack("<Q", os.pread(fd, 8, 0))
            if n > HEADER_CAP:
                raise SafetensorsError(
                    f"{where}: header length {n} exceeds the 100 MB safetensors limit"
                )
            if 8 + n > size:
                raise SafetensorsError(
                    f"{where}: header length {n} runs past the end of the {size}-byte file"
                )
            raw = os.pread(fd, n, 8)
            if not raw.startswith(b"{"):
                raise SafetensorsError(f"{where}: not a safetensors file: header is not JSON")
            self.header_bytes: bytes = raw
            self.data_start = 8 + n
            self.size = size
            rel, self.metadata = parse_header(raw, size - self.data_start, where)
            self.tensors: list[TensorInfo] = [
                TensorInfo(t.name, t.dtype, t.shape, t.begin + self.data_start,
                           t.end + self.data_start)
                for t in rel
            ]  # fmt: skip
            self._mm = mmap.mmap(fd, 0, access=mmap.ACCESS_READ)
        except BaseException:
            os.close(fd)
            raise
        self._fd = fd

    def fileno(self) -> int:
        """The open read-only descriptor (for in-kernel copies)."""
        return self._fd

    def view(self, begin: int, end: int) -> U8Array:
        """Bytes ``[begin, end)`` of the file as a zero-copy uint8 view."""
        return np.frombuffer(self._mm, dtype=np.uint8, count=end - begin, offset=begin)

    def release(self, begin: int, end: int) -> None:
        """Drop our mapping of a range so RSS does not grow with model size."""
        start = begin - begin % mmap.PAGESIZE
        if end > start:
            self._mm.madvise(mmap.MADV_DONTNEED, start, end - start)

    def close(self) -> None:
        if self._fd >= 0:
            os.close(self._fd)
            self._fd = -1
        # A caller may still hold a view; then the GC unmaps it later.
        with contextlib.suppress(BufferError):
            self._mm.close()


@dataclass(frozen=True)
class Located:
    """A tensor and the shard that holds it."""

    file: SafetensorsFile
    info: TensorInfo


class Checkpoint:
    """One safetensors file, or a directory of shards with an index."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.index_bytes: bytes | None = None
        self.sharded = path.is_dir()
        if not path.exists():
            raise SafetensorsError(f"{path}: no such file or directory")
        if self.sharded:
            names = self._shard_names(path)
            # A lone file's name is not part of the checkpoint (digest and
            # delta ignore it); shard names are, because the index names them.
            self.files = []
            try:
                for n in names:
                    self.files.append(SafetensorsFile(path / n, name=n if self.sharded else ""))
            except BaseException:
                self.close()  # do not leak descriptors of shards opened so far
                raise
        else:
            self.files = [SafetensorsFile(path, name="")]
        self.by_name: dict[str, Located] = {}
        for f in self.files:
            for t in f.tensors:
                if t.name in self.by_name:
                    raise SafetensorsError(
                        f"{f.path}: tensor {t.name!r} also appears in "
                        f"{self.by_name[t.name].file.path}"
                    )
                self.by_name[t.name] = Located(f, t)
        if self.index_bytes is not None:
            self._check_index()

    def _shard_names(self, path: Path) -> list[str]:
        index = path / INDEX_NAME
        if not index.is_file():
            found = sorted(p.name for p in path.glob("*.safetensors"))
            if len(found) != 1:
                raise SafetensorsError(
                    f"{path}: a checkpoint directory needs {INDEX_NAME} "
                    f"or exactly one .safetensors file (found {len(found)})"
                )
            self.sharded = False
            return found
        if index.stat().st_size > INDEX_CAP:
            raise SafetensorsError(f"{index}: larger than the {INDEX_CAP}-byte limit")
        self.index_bytes = index.read_bytes()
        try:
            doc = json.loads(self.index_bytes, object_pairs_hook=_no_duplicates)
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            raise SafetensorsError(f"{index}: not valid JSON: {exc}") from None
        wm = doc.get("weight_map") if isinstance(doc, dict) else None
        if not isinstance(wm, dict) or not all(isinstance(v, str) for v in wm.values()):
            raise SafetensorsError(f"{index}: weight_map must map tensor names to shard files")
        self._weight_map: dict[str, str] = wm
        shards = sorted(set(wm.values()))
        for s in shards:
            if "/" in s or s in {"", ".", ".."} or "\\" in s:
                raise SafetensorsError(f"{index}: shard name {s!r} must be a plain file name")
        return shards

    def _check_index(self) -> None:
        index = self.path / INDEX_NAME
        for name, shard in self._weight_map.items():
            loc = self.by_name.get(name)
            if loc is None:
                raise SafetensorsError(f"{index}: tensor {name!r} is not in shard {shard}")
            if loc.file.name != shard:
                raise SafetensorsError(
                    f"{index}: tensor {name!r} is mapped to {shard} but lives in {loc.file.name}"
                )
        extra = sorted(set(self.by_name) - set(self._weight_map))
        if extra:
            raise SafetensorsError(f"{index}: tensor {extra[0]!r} is in a shard but not indexed")

    @property
    def nbytes(self) -> int:
        return sum(f.size for f in self.files)

    def tensors(self) -> Iterator[Located]:
        for f in self.files:
            for t in f.tensors:
                yield Located(f, t)

    def close(self) -> None:
        for f in self.files:
            f.close()
