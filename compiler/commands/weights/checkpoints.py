"""The ``standbyc weights`` actions on checkpoints: manifest, diff, apply and verify
(imported only when one of them runs)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

from compiler.commands.weights.exits import EXIT_CODES
from compiler.errors import UsageError
from compiler.output import Message, emit
from compiler.weights.apply import apply
from compiler.weights.diff import diff
from compiler.weights.encode import COPY, RAW, RAW_Z, SPARSE, SPARSE_PLANES, XOR
from compiler.weights.errors import VerifyFailed
from compiler.weights.manifest import Manifest, build_manifest, load_manifest
from compiler.weights.progress import byte_progress
from compiler.weights.safetensors_io import Checkpoint
from compiler.weights.sync.publish import check_chunk


def emit_result(args: argparse.Namespace, doc: dict[str, Any], text: str) -> None:
    """Print an action's result: its document, or its line of text."""
    emit(Message(doc, text), args.format)


def path_bytes(path: Path) -> int:
    """The bytes of a checkpoint: a file, or the files of a directory (0: none yet)."""
    if path.is_dir():
        return sum(p.stat().st_size for p in path.iterdir() if p.is_file())
    return path.stat().st_size if path.exists() else 0


def _manifest_of(path: Path, chunk: int, bar: bool) -> Manifest:
    ckpt = Checkpoint(path)
    try:
        with byte_progress(f"hash {path.name}", ckpt.nbytes, bar) as prog:
            return build_manifest(ckpt, chunk, prog)
    finally:
        ckpt.close()


def cmd_manifest(args: argparse.Namespace) -> int:
    check_chunk(args.chunk_size)
    t0 = time.perf_counter()
    man = _manifest_of(args.path, args.chunk_size, args.output is not None)
    text = json.dumps(man.to_json(), indent=1, sort_keys=True) + "\n"
    secs = time.perf_counter() - t0
    if args.output is None:
        sys.stdout.write(text)
        return 0
    args.output.write_text(text)
    n = sum(len(f.tensors) for f in man.files)
    emit_result(
        args,
        {
            "path": str(args.path),
            "manifest": str(args.output),
            "digest": man.digest,
            "bytes": man.nbytes,
            "tensors": n,
            "seconds": round(secs, 4),
        },
        f"{args.path}: {n} tensors, {man.nbytes} bytes, digest {man.digest} -> {args.output}",
    )
    return 0


def cmd_diff(args: argparse.Namespace) -> int:
    check_chunk(args.chunk_size)
    if args.base_manifest is not None:
        if len(args.paths) != 1:
            raise UsageError("diff --base-manifest M takes exactly one path: NEW")
        old, new, base = None, args.paths[0], load_manifest(args.base_manifest)
    else:
        if len(args.paths) != 2:
            raise UsageError("diff takes OLD NEW (or --base-manifest M NEW)")
        old, new, base = args.paths[0], args.paths[1], None
    total = path_bytes(new) + (path_bytes(old) if old is not None else 0)
    with byte_progress("diff", total, args.format == "text") as prog:
        stats = diff(new, args.output, old_path=old, base_manifest=base,
                     chunk=args.chunk_size, progress=prog)  # fmt: skip
    doc = stats.to_json() | {"delta": str(args.output)}
    chunks = {CHUNK_OPS.get(op, op): n for op, n in stats.chunks.items()}
    emit_result(
        args,
        doc,
        f"{args.output}: {stats.delta_bytes} bytes = {100 * doc['ratio']:.2f}% of "
        f"{stats.target_bytes}; tensors: {_counts(stats.tensors)}; chunks: {_counts(chunks)}; "
        f"{stats.seconds:.2f} s ({doc['gb_per_s']:.2f} GB/s)",
    )
    return 0


CHUNK_OPS = {
    COPY: "copied", SPARSE: "sparse (zstd)", SPARSE_PLANES: "sparse", XOR: "xor", RAW: "raw",
    RAW_Z: "raw (zstd)",
}  # fmt: skip


def _counts(counter: dict[str, int]) -> str:
    return ", ".join(f"{n} {kind}" for kind, n in sorted(counter.items())) or "none"


def cmd_apply(args: argparse.Namespace) -> int:
    out = None if args.in_place else args.output
    passes = 3 if args.reread else 2  # base check, write, optional re-read
    with byte_progress("apply", passes * path_bytes(args.base), args.format == "text") as prog:
        stats = apply(args.base, args.delta, out, progress=prog, reread=args.reread)
    target = args.base if out is None else out
    doc = stats.to_json() | {"output": str(target), "verified": True}
    emit_result(
        args,
        doc,
        f"{target}: rebuilt {stats.target_bytes} bytes from a {stats.delta_bytes}-byte delta, "
        f"target digest verified; {stats.seconds:.2f} s ({doc['gb_per_s']:.2f} GB/s)",
    )
    return 0


def cmd_verify(args: argparse.Namespace) -> int:
    want = load_manifest(args.manifest)
    got = _manifest_of(args.path, want.chunk_size, args.format == "text")
    problems = _compare(want, got)
    doc = {"path": str(args.path), "manifest": str(args.manifest), "ok": not problems,
           "digest": got.digest, "expected": want.digest, "problems": problems}  # fmt: skip
    if problems:
        listed = "\n  ".join(problems[:20])
        return emit(
            Message(doc, "", f"{args.path} does not match {args.manifest}:\n  {listed}",
                    EXIT_CODES[VerifyFailed]),
            args.format,
        )  # fmt: skip
    emit_result(args, doc, f"{args.path}: OK, digest {got.digest}")
    return 0


def _compare(want: Manifest, got: Manifest) -> list[str]:
    if want.digest == got.digest:
        return []
    out: list[str] = []
    w, g = want.by_name(), got.by_name()
    out += [f"tensor {n!r} is missing" for n in sorted(set(w) - set(g))]
    out += [f"tensor {n!r} is unexpected" for n in sorted(set(g) - set(w))]
    for name in sorted(set(w) & set(g)):
        a, b = w[name], g[name]
        if (a.dtype, a.shape) != (b.dtype, b.shape):
            out.append(f"tensor {name!r}: {b.dtype}{list(b.shape)}, expected "
                       f"{a.dtype}{list(a.shape)}")  # fmt: skip
        elif a.hash != b.hash:
            bad = [i for i, (x, y) in enumerate(zip(a.chunks, b.chunks, strict=True)) if x != y]
            out.append(f"tensor {name!r}: {len(bad)} chunk(s) differ, first at byte offset "
                       f"{bad[0] * want.chunk_size} of the tensor")  # fmt: skip
    if not out:
        out.append("file layout, header or metadata differs (every tensor matches)")
    return out
