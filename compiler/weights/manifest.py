"""Manifests: per-chunk, per-tensor and whole-checkpoint xxh3-128 hashes.

Definitions (docs/delta-format.md, "Hashes"):

* chunk hash  = xxh3-128 of ``chunk_size`` bytes of one tensor (last chunk shorter);
* tensor hash = xxh3-128 of the concatenated 16-byte chunk hashes, so one
  pass yields both and a torch tensor can be checked the same way;
* header hash = xxh3-128 of a file's first ``8 + N`` bytes (length + JSON);
* checkpoint digest = xxh3-128 of canonical JSON listing, per file in order,
  its name, header hash and tensor hashes in data order, plus the index hash.

Header bytes and tensor bytes together are the whole file, so equal digests
mean byte-identical files.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import xxhash

from compiler.weights import DEFAULT_CHUNK
from compiler.weights.errors import WeightsError
from compiler.weights.safetensors_io import (
    DTYPE_WIDTH,
    INDEX_NAME,
    Checkpoint,
    SafetensorsFile,
    TensorInfo,
    U8Array,
    open_regular,
)

MIN_CHUNK = 1 << 12
MAX_CHUNK = 1 << 26
# Release mapped pages after this many bytes so RSS stays flat.
WINDOW = 64 << 20
MANIFEST_CAP = 512 << 20
HASH_THREADS = 2

Progress = Callable[[int], None]


def h128(data: bytes | U8Array) -> bytes:
    return xxhash.xxh3_128_digest(data if isinstance(data, bytes) else data.data)


def chunk_spans(nbytes: int, chunk: int) -> Iterator[tuple[int, int]]:
    for lo in range(0, nbytes, chunk):
        yield lo, min(lo + chunk, nbytes)


def tensor_hash(chunk_hashes: list[bytes]) -> bytes:
    return h128(b"".join(chunk_hashes))


def hash_tensor(f: SafetensorsFile, t: TensorInfo, chunk: int) -> tuple[bytes, list[bytes]]:
    """Hash one tensor chunk by chunk straight from the mmap."""
    hashes: list[bytes] = []
    done = 0
    for lo, hi in chunk_spans(t.nbytes, chunk):
        hashes.append(h128(f.view(t.begin + lo, t.begin + hi)))
        if hi - done >= WINDOW or hi == t.nbytes:
            f.release(t.begin + done, t.begin + hi)
            done = hi
    return tensor_hash(hashes), hashes


def header_hash(f: SafetensorsFile) -> bytes:
    return h128(f.view(0, f.data_start))


def checkpoint_digest(
    chunk: int, files: list[tuple[str, bytes, list[bytes]]], index_hash: bytes | None
) -> str:
    doc = {
        "chunk_size": chunk,
        "files": [
            {"name": n, "header": hh.hex(), "tensors": [t.hex() for t in ts]} for n, hh, ts in files
        ],
        "index": index_hash.hex() if index_hash is not None else None,
    }
    return h128(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hex()


@dataclass(frozen=True)
class TensorEntry:
    name: str
    dtype: str
    shape: tuple[int, ...]
    offset: int  # absolute offset of the tensor's data in its file
    nbytes: int
    hash: bytes
    chunks: tuple[bytes, ...]


@dataclass(frozen=True)
class FileEntry:
    name: str
    size: int
    header_hash: bytes
    metadata: dict[str, str]
    tensors: tuple[TensorEntry, ...]


@dataclass(frozen=True)
class Manifest:
    chunk_size: int
    sharded: bool
    index_hash: bytes | None
    files: tuple[FileEntry, ...]
    digest: str

    def by_name(self) -> dict[str, TensorEntry]:
        return {t.name: t for f in self.files for t in f.tensors}

    @property
    def nbytes(self) -> int:
        return sum(f.size for f in self.files)

    def to_json(self) -> dict[str, Any]:
        return {
            "format": "standbyc-weights-manifest",
            "version": 1,
            "hash": "xxh3-128",
            "chunk_size": self.chunk_size,
            "digest": self.digest,
            "sharded": self.sharded,
            "index": None
            if self.index_hash is None
            else {"name": INDEX_NAME, "xxh128": self.index_hash.hex()},
            "files": [
                {
                    "name": f.name,
                    "size": f.size,
                    "header_xxh128": f.header_hash.hex(),
                    "metadata": f.metadata,
                    "tensors": [
                        {
                            "name": t.name,
                            "dtype": t.dtype,
                            "shape": list(t.shape),
                            "offset": t.offset,
                            "nbytes": t.nbytes,
                            "xxh128": t.hash.hex(),
                            "chunks": [c.hex() for c in t.chunks],
                        }
                        for t in f.tensors
                    ],
                }
                for f in self.files
            ],
        }


def build_manifest(
    ckpt: Checkpoint, chunk: int = DEFAULT_CHUNK, progress: Progress | None = None
) -> Manifest:
    """Hash every tensor of a checkpoint, streaming from the mapped files.

    Two threads take the tensors in turn: xxhash releases the GIL and the page
    faults of one overlap the hashing of the other (0.16 s -> 0.12 s per GiB on
    the 2-core CI VM). Each thread keeps at most one ``WINDOW`` mapped.
    """
    todo = [(f, t) for f in ckpt.files for t in f.tensors]
    files: list[FileEntry] = []
    with ThreadPoolExecutor(HASH_THREADS, thread_name_prefix="standbyc-hash") as pool:
        results = pool.map(lambda ft: hash_tensor(ft[0], ft[1], chunk), todo)  # in order
        for f in ckpt.files:
            entries = []
            for t in f.tensors:
                th, chs = next(results)
                entries.append(
                    TensorEntry(t.name, t.dtype, t.shape, t.begin, t.nbytes, th, tuple(chs))
                )
                if progress:
                    progress(t.nbytes)
            files.append(FileEntry(f.name, f.size, header_hash(f), f.metadata, tuple(entries)))
    index_hash = h128(ckpt.index_bytes) if ckpt.index_bytes is not None else None
    digest = checkpoint_digest(
        chunk, [(f.name, f.header_hash, [t.hash for t in f.tensors]) for f in files], index_hash
    )
    return Manifest(chunk, ckpt.sharded, index_hash, tuple(files), digest)


def _hex16(value: object, where: str) -> bytes:
    if not isinstance(value, str) or len(value) != 32:
        raise WeightsError(f"{where}: expected a 32-digit hex xxh3-128 hash")
    try:
        return bytes.fromhex(value)
    except ValueError:
        raise WeightsError(f"{where}: expected a 32-digit hex xxh3-128 hash") from None


def _int(value: object, where: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise WeightsError(f"{where}: expected a non-negative integer")
    return value


def load_manifest(path: Path) -> Manifest:
    """Read and strictly validate a manifest; recompute its digest."""
    try:
        fd = open_regular(path, WeightsError, "manifest")
        with os.fdopen(fd, "rb") as f:
            if os.fstat(fd).st_size > MANIFEST_CAP:
                raise WeightsError(f"{path}: manifest larger than {MANIFEST_CAP} bytes")
            doc = json.loads(f.read())
    except OSError as exc:
        raise WeightsError(f"{path}: cannot read manifest: {exc.strerror}") from None
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise WeightsError(f"{path}: manifest is not valid JSON: {exc}") from None
    try:
        return _parse_manifest(doc, str(path))
    except (KeyError, TypeError, AttributeError) as exc:
        raise WeightsError(f"{path}: malformed manifest: missing or wrong field {exc}") from None


def _parse_manifest(doc: Any, where: str) -> Manifest:
    if doc.get("format") != "standbyc-weights-manifest" or doc.get("version") != 1:
        raise WeightsError(f"{where}: not a standbyc weights manifest version 1")
    chunk = _int(doc["chunk_size"], f"{where}: chunk_size")
    if not MIN_CHUNK <= chunk <= MAX_CHUNK or chunk & (chunk - 1):
        raise WeightsError(f"{where}: chunk_size {chunk} must be a power of two in [4 KiB, 64 MiB]")
    idx = doc["index"]
    index_hash = None if idx is None else _hex16(idx["xxh128"], f"{where}: index")
    files = []
    for i, fd in enumerate(doc["files"]):
        fw = f"{where}: files[{i}]"
        tensors = []
        for j, td in enumerate(fd["tensors"]):
            tw = f"{fw}.tensors[{j}]"
            name, dtype = td["name"], td["dtype"]
            if not isinstance(name, str) or not isinstance(dtype, str) or dtype not in DTYPE_WIDTH:
                raise WeightsError(f"{tw}: bad name or dtype")
            shape = tuple(_int(d, f"{tw}.shape") for d in td["shape"])
            nbytes = _int(td["nbytes"], f"{tw}.nbytes")
            chunks = tuple(_hex16(c, f"{tw}.chunks") for c in td["chunks"])
            if len(chunks) != -(-nbytes // chunk):
                raise WeightsError(f"{tw}: {len(chunks)} chunk hashes for {nbytes} bytes")
            th = _hex16(td["xxh128"], f"{tw}.xxh128")
            if tensor_hash(list(chunks)) != th:
                raise WeightsError(f"{tw}: tensor hash does not match its chunk hashes")
            tensors.append(
                TensorEntry(name, dtype, shape, _int(td["offset"], tw), nbytes, th, chunks)
            )
        meta = fd["metadata"]
        if not isinstance(meta, dict) or not all(isinstance(v, str) for v in meta.values()):
            raise WeightsError(f"{fw}.metadata: must map strings to strings")
        files.append(
            FileEntry(str(fd["name"]), _int(fd["size"], fw),
                      _hex16(fd["header_xxh128"], fw), meta, tuple(tensors))
        )  # fmt: skip
    digest = checkpoint_digest(
        chunk, [(f.name, f.header_hash, [t.hash for t in f.tensors]) for f in files], index_hash
    )
    if digest != doc["digest"]:
        raise WeightsError(f"{where}: digest {doc['digest']} does not match its contents")
    return Manifest(chunk, bool(doc["sharded"]), index_hash, tuple(files), digest)
