"""Step 6: read, compare and atomically replace the output directory.

standbyc owns the files in ``out/`` that start with its header; anything else
is the user's and is carried over untouched. A new tree is built in a
sibling directory, validated there, and swapped in with two renames. If
anything fails before the swap, ``out/`` is exactly as it was. A crash
between the two renames leaves ``.<out>.standbyc-old``, which the next run
moves back before doing anything else.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from compiler import yamlio
from compiler.errors import UsageError
from compiler.fsutil import exclusive, fsync_path

MAX_OWNED_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Contents:
    owned: dict[str, str]  # standbyc's files, by path relative to out/
    foreign: list[str]  # everything else, carried over as is


def _sibling(out: Path, suffix: str) -> Path:
    return out.parent / f".{out.name}.standbyc-{suffix}"


def read(out: Path) -> Contents:
    owned: dict[str, str] = {}
    foreign: list[str] = []
    if not out.is_dir():
        return Contents(owned, foreign)
    for path in sorted(out.rglob("*")):
        if not path.is_file() or path.is_symlink():
            continue
        rel = path.relative_to(out).as_posix()
        text = None
        if path.stat().st_size <= MAX_OWNED_BYTES:
            with contextlib.suppress(UnicodeDecodeError):
                text = path.read_text(encoding="utf-8")
        if text is not None and yamlio.is_generated(text):
            owned[rel] = text
        else:
            foreign.append(rel)
    return Contents(owned, foreign)


def diff(current: dict[str, str], desired: dict[str, str], out_name: str) -> str:
    """Unified diffs, file by file, from what is in ``out/`` to what should be."""
    chunks: list[str] = []
    for rel in sorted(set(current) | set(desired)):
        before, after = current.get(rel), desired.get(rel)
        if before == after:
            continue
        chunks.extend(
            difflib.unified_diff(
                (before or "").splitlines(keepends=True),
                (after or "").splitlines(keepends=True),
                fromfile=f"{out_name}/{rel}" if before is not None else "/dev/null",
                tofile=f"{out_name}/{rel}" if after is not None else "/dev/null",
            )
        )
    return "".join(chunks)


def locked(out: Path) -> contextlib.AbstractContextManager[None]:
    """One standbyc at a time per output directory (a lock on its parent: no stray file)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    return exclusive(out.parent, UsageError(f"another standbyc is writing {out}; try again"))


def recover(out: Path) -> None:
    """Finish or undo a swap that a crash interrupted."""
    old, new = _sibling(out, "old"), _sibling(out, "new")
    if old.exists():
        if out.exists():
            shutil.rmtree(old)
        else:
            old.rename(out)
    if new.exists():
        shutil.rmtree(new)


def _carry(source: Path, target: Path) -> None:
    """Put an existing, already durable file into the staged tree: a hard link, else a copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)


def _stage(out: Path, contents: Contents, desired: dict[str, str]) -> Path:
    staging = _sibling(out, "new")
    staging.mkdir()
    for rel in contents.foreign:
        if rel in desired:
            raise UsageError(
                f"refusing to overwrite {out.name}/{rel}: it was not written by standbyc "
                "(no generated header); move it away first"
            )
        _carry(out / rel, staging / rel)
    for rel, text in desired.items():
        target = staging / rel
        if contents.owned.get(rel) == text:
            _carry(out / rel, target)  # unchanged: no write, no fsync
            continue
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
            handle.flush()
            os.fsync(handle.fileno())
    return staging


def replace(
    out: Path,
    build: Callable[[Contents], dict[str, str]],
    validate: Callable[[Path], None] | None = None,
) -> bool:
    """Make ``out/``'s owned files exactly ``build(contents of out/)``; return whether
    anything changed.

    The lock is taken before ``out/`` is read, so the tree is built from what is really
    there. ``validate`` runs on the staged tree; if it raises, nothing is swapped.
    """
    with locked(out):
        recover(out)
        contents = read(out)
        desired = build(contents)
        staging = _stage(out, contents, desired)
        try:
            if validate is not None:
                validate(staging)
            if contents.owned == desired and out.is_dir():
                return False
            old = _sibling(out, "old")
            if out.exists():
                out.rename(old)
            staging.rename(out)
            fsync_path(out.parent)
            if old.exists():
                shutil.rmtree(old)
            return True
        finally:
            if staging.exists():
                shutil.rmtree(staging)
