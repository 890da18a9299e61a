"""Compose the deltas F->G and G->H into one merged delta F->H, reading no checkpoint.

Each chunk op either patches its source chunk by XOR (``RELATIVE_OPS``) or holds the new
bytes (``ABSOLUTE_OPS``), so chunk by chunk:

* anything then absolute: the absolute op;
* absolute then relative: the absolute bytes XOR the second mask, stored absolute;
* relative then relative: the XOR of the two masks, re-encoded as a relative op over a
  zero source (all zero: a copy).

H's layout (files, headers, index, tensor order) comes from G->H as it is; each H tensor
takes its source through G->F: a whole-tensor copy of a G tensor becomes whatever F->G
says of that tensor (a rename or reshape carries through), a tensor G->H writes raw
stays raw. The result carries F's and H's checkpoint digests; ``apply`` checks it like
any other delta. A chunk whose merged mask the encoder stores only as an absolute op
cannot be expressed without F's bytes: that raises ``MergeImpossible``, and the caller
keeps the chain instead.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from compiler.forkmap import fork_imap
from compiler.weights.deltafile import (
    FORMAT,
    VERSION,
    ChunkOp,
    DeltaReader,
    DeltaWriter,
    Section,
    SourceRef,
    TensorDelta,
    iter_chunks,
)
from compiler.weights.encode import (
    ABSOLUTE_OPS,
    COPY,
    RELATIVE_OPS,
    Decoder,
    Encoded,
    Encoder,
)
from compiler.weights.errors import DeltaError
from compiler.weights.safetensors_io import DTYPE_WIDTH, U8Array

# A merge composes its tensors in worker processes (one per core) when there are this
# many and the target is this large: below, starting the workers costs more than they
# save (about 2 s per GiB of model in one process, 1.6x faster on two cores).
PARALLEL_FROM = 8
PARALLEL_BYTES = 64 << 20


class MergeImpossible(DeltaError):
    """The two deltas compose only with a checkpoint at hand."""


@dataclass
class MergeStats:
    first_bytes: int = 0
    second_bytes: int = 0
    merged_bytes: int = 0
    reencoded: int = 0  # chunks decoded and encoded again
    passed: int = 0  # chunks whose payload was carried over as it was


def merge(first: Path, second: Path, out: Path) -> MergeStats:
    """Write the delta ``first`` then ``second`` at ``out``; both are checked whole first."""
    a, b = DeltaReader(first), DeltaReader(second)
    try:
        a.verify_payload()
        b.verify_payload()
        _check_pair(a, b)
        writer = DeltaWriter(out)
        try:
            job = _Merge(a, b, writer)
            header = job.run()
            size = writer.finish(header)
        except BaseException:
            writer.abort()
            raise
    finally:
        a.close()
        b.close()
    return MergeStats(a.size, b.size, size, job.reencoded, job.passed)


def _check_pair(a: DeltaReader, b: DeltaReader) -> None:
    ha, hb = a.header, b.header
    if ha.target_digest != hb.base_digest:
        raise DeltaError(
            f"{b.path}: applies to checkpoint {hb.base_digest}, but {a.path} builds "
            f"{ha.target_digest}: the deltas do not follow each other"
        )
    if ha.chunk_size != hb.chunk_size:
        raise DeltaError(
            f"{b.path}: chunk size {hb.chunk_size}, {a.path} has {ha.chunk_size}: "
            "chunk ops of different sizes do not line up"
        )


class _Merge:
    def __init__(self, a: DeltaReader, b: DeltaReader, writer: DeltaWriter) -> None:
        self.a, self.b, self.w = a, b, writer
        self.chunk = a.header.chunk_size
        self.first = {t.name: t for t in a.header.tensors}
        self.enc = Encoder(self.chunk)
        self.dec = Decoder()
        self.zero = np.zeros(self.chunk, dtype=np.uint8)
        self.mask_a = np.empty(self.chunk, dtype=np.uint8)
        self.mask_b = np.empty(self.chunk, dtype=np.uint8)
        self.reencoded = 0  # chunks encoded again, in all
        self.passed = 0  # chunks carried over, in all
        # The tensor being composed: its payloads in order, its chunks encoded and carried.
        self.payloads: list[bytes] = []
        self.counts = [0, 0]

    def run(self) -> dict[str, Any]:
        ha, hb = self.a.header, self.b.header
        try:
            index = None
            if hb.index is not None:
                index = self._carry(hb.index)
            files = [
                {
                    "name": f.name,
                    "size": f.size,
                    "header": self._carry(f.header),
                    "header_xxh128": f.header_hash.hex(),
                    "tensors": list(f.tensors),
                }
                for f in hb.files
            ]
            # Tensors compose independently, in worker processes on a large delta. Each
            # gives its entry and payloads; they are written here, in order, so the file
            # is the same as a one-process run's.
            tensors = []
            large = hb.target_size >= PARALLEL_BYTES
            for entry, payloads, (encoded, passed) in fork_imap(
                self._composed,
                hb.tensors,
                min_items=PARALLEL_FROM if large else sys.maxsize,
                chunksize=1,
            ):
                for data in payloads:
                    self.w.add(data)
                tensors.append(entry)
                self.reencoded += encoded
                self.passed += passed
        finally:
            self.enc.close()
        return {
            "format": FORMAT,
            "version": VERSION,
            "chunk_size": self.chunk,
            "base": {"digest": ha.base_digest, "size": ha.base_size},
            "target": {
                "digest": hb.target_digest,
                "size": hb.target_size,
                "sharded": hb.sharded,
                "index": index,
                "files": files,
            },
            "tensors": tensors,
        }

    def _carry(self, s: Section) -> dict[str, int]:
        self.w.add(bytes(self.b.section(s.offset, s.length)))
        return {"len": s.length, "size": s.size}

    def _source_in_g(self, t: TensorDelta) -> TensorDelta | None:
        """G->H's source of ``t`` as F->G describes it (None: ``t`` is written raw)."""
        if t.source is None:
            return None
        g = self.first.get(t.source.name)
        if g is None or g.nbytes != t.source.nbytes or g.hash != t.source.hash:
            raise DeltaError(
                f"{self.b.path}: tensor {t.name!r} comes from {t.source.name!r}, which "
                f"{self.a.path} does not build with that size and hash"
            )
        return g

    def _composed(self, t: TensorDelta) -> tuple[dict[str, Any], list[bytes], tuple[int, int]]:
        """H tensor ``t``: its entry, its payloads in order, and how many of its chunks
        were encoded again and carried over."""
        self.payloads, self.counts = [], [0, 0]
        entry = self._tensor(t)
        return entry, self.payloads, (self.counts[0], self.counts[1])

    def _tensor(self, t: TensorDelta) -> dict[str, Any]:
        entry: dict[str, Any] = {
            "name": t.name,
            "dtype": t.dtype,
            "shape": list(t.shape),
            "nbytes": t.nbytes,
            "xxh128": t.hash.hex(),
            "source": None,
        }
        g = self._source_in_g(t)
        if g is None:  # raw in G->H: every op is absolute, carried as it is
            entry["chunks"] = [self._pass(self.b, op) for op in t.chunks]
            return entry
        entry["source"] = _ref(g.source)
        if t.whole_copy and g.whole_copy:
            entry["chunks"] = "copy"
            return entry
        # A whole copy of a chunked G tensor takes G's chunking (same size, same spans).
        spans = iter_chunks(g if t.whole_copy else t, self.chunk)
        ops = [self._chunk(t, g, lo, hi, k) for k, (lo, hi, _) in enumerate(spans)]
        if ops and g.source is not None and all(o[0] == COPY for o in ops):
            entry["chunks"] = "copy"  # every change cancelled out: F's tensor as it was
        else:
            entry["chunks"] = ops
        return entry

    def _chunk(self, t: TensorDelta, g: TensorDelta, lo: int, hi: int, k: int) -> list[Any]:
        """Chunk ``k`` of H tensor ``t``, whose G source ``g`` F->G describes."""
        wt, wg = DTYPE_WIDTH[t.dtype], DTYPE_WIDTH[g.dtype]
        op_b = None if t.whole_copy else t.chunks[k]
        op_a = None if g.whole_copy else g.chunks[k]
        carried = self._carried(op_a, op_b, same_width=wt == wg)
        if carried is not None:
            return carried
        assert op_a is not None
        n, where = hi - lo, f"{t.name!r} chunk {k}"
        mask_b = self.zero[:n]
        if op_b is not None:
            mask_b = self._decode(self.b, op_b, old=mask_b, out=self.mask_b[:n], width=wt,
                                  where=where)  # fmt: skip
        if op_a.op in ABSOLUTE_OPS:
            new = self._decode(self.a, op_a, old=None, out=self.mask_a[:n], width=wg, where=where)
            np.bitwise_xor(new, mask_b, out=new)
            return self._emit(self.enc.raw(new, wt))
        mask = self._decode(self.a, op_a, old=self.zero[:n], out=self.mask_a[:n], width=wg,
                            where=where)  # fmt: skip
        np.bitwise_xor(mask, mask_b, out=mask)
        if not mask.any():
            return [COPY, 0]
        e = self.enc.delta(self.zero[:n], mask, wt)
        if e.op not in RELATIVE_OPS:
            raise MergeImpossible(
                f"{where}: the merged change is stored only as new bytes, which needs the "
                "base checkpoint"
            )
        return self._emit(e)

    def _carried(
        self, op_a: ChunkOp | None, op_b: ChunkOp | None, *, same_width: bool
    ) -> list[Any] | None:
        """The chunk when one of the two ops decides it alone (None: both count)."""
        if op_b is not None and op_b.op in ABSOLUTE_OPS:
            return self._pass(self.b, op_b)
        if op_a is None or op_a.op == COPY:  # G's chunk is F's: the second op as it is
            return [COPY, 0] if op_b is None else self._pass(self.b, op_b)
        if (op_b is None or op_b.op == COPY) and same_width:
            return self._pass(self.a, op_a)  # H's chunk is G's
        return None

    def _decode(
        self,
        r: DeltaReader,
        op: ChunkOp,
        *,
        old: U8Array | None,
        out: U8Array,
        width: int,
        where: str,
    ) -> U8Array:
        payload = r.section(op.offset, op.length)
        self.dec.decode(
            op.op, payload=payload, params=op.params, old=old, out=out, width=width, where=where
        )
        return out

    def _pass(self, r: DeltaReader, op: ChunkOp) -> list[Any]:
        self.counts[1] += 1
        self.payloads.append(bytes(r.section(op.offset, op.length)))
        return [op.op, op.length, *op.params]

    def _emit(self, e: Encoded) -> list[Any]:
        self.counts[0] += 1
        self.payloads.append(e.payload)
        return [e.op, len(e.payload), *e.params]


def _ref(s: SourceRef | None) -> dict[str, Any] | None:
    if s is None:
        return None
    return {"name": s.name, "nbytes": s.nbytes, "xxh128": s.hash.hex()}
