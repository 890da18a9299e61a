"""Step 6: read, compare and atomically replace the output directory.

standbyc owns the files in ``out/`` that start with its header; anything else
(files, symlinks, empty directories, FIFOs) is the user's and is carried over
untouched. A new tree is built in a sibling directory, validated there, and
swapped in with one atomic exchange (``renameat2(RENAME_EXCHANGE)``), so at
every instant ``out/`` is either the old tree or the new one, never missing.
If anything fails before the swap, ``out/`` is exactly as it was; a killed run
leaves only ``.<out>.standbyc-new``, which the next run removes.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import shutil
import stat
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from compiler import yamlio
from compiler.errors import UsageError
from compiler.fsutil import exchange, exclusive, fsync_path, resolved, shared, sync_files

MAX_OWNED_BYTES = 16 * 1024 * 1024


@dataclass(frozen=True)
class Contents:
    owned: dict[str, str]  # standbyc's files, by path relative to out/
    foreign: list[str]  # the user's regular files, carried over as they are
    links: dict[str, str] = field(default_factory=dict)  # the user's symlinks -> their targets
    dirs: list[str] = field(default_factory=list)  # the user's empty directories
    fifos: list[str] = field(default_factory=list)
    # owned files whose bytes are not their text's: CRLF newlines, read as LF
    translated: set[str] = field(default_factory=set)


def _sibling(out: Path, suffix: str) -> Path:
    return out.parent / f".{out.name}.standbyc-{suffix}"


def _owned_text(path: str, size: int) -> tuple[str, bool] | None:
    """The file's text if it is standbyc's (read as ``Path.read_text`` reads: newlines
    translated) and whether it was translated; else None."""
    if size > MAX_OWNED_BYTES:
        return None
    with open(path, "rb") as fh:  # noqa: PTH123
        data = fh.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return None
    translated = "\r" in text
    if translated:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return (text, translated) if yamlio.is_generated(text) else None


def read(out: Path) -> Contents:
    contents = Contents({}, [])
    if not out.is_dir():
        return contents

    def visit(directory: str, prefix: str) -> int:
        """Sort ``directory``'s entries into ``contents``; return how many it has."""
        with os.scandir(directory) as it:
            entries = sorted(it, key=lambda e: e.name)
        for entry in entries:
            rel = prefix + entry.name
            if entry.is_symlink():  # never followed
                contents.links[rel] = os.readlink(entry.path)  # noqa: PTH115 -- a DirEntry
            elif entry.is_dir(follow_symlinks=False):
                if not visit(entry.path, rel + "/"):
                    contents.dirs.append(rel)
            elif entry.is_file(follow_symlinks=False):
                size = entry.stat(follow_symlinks=False).st_size
                if (owned := _owned_text(entry.path, size)) is not None:
                    contents.owned[rel] = owned[0]
                    if owned[1]:
                        contents.translated.add(rel)
                else:
                    contents.foreign.append(rel)
            elif stat.S_ISFIFO(entry.stat(follow_symlinks=False).st_mode):
                contents.fifos.append(rel)
            else:
                raise UsageError(
                    f"{out}/{rel}: a socket or device file in the output directory; standbyc "
                    "cannot carry it into the new tree, so move it away first"
                )
        return len(entries)

    visit(str(out), "")
    contents.foreign.sort()
    contents.dirs.sort()
    contents.fifos.sort()
    return contents


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


# A compile waits this long for the lock: a `check` reading out/ holds it for as long as
# the read takes; another compile holds it for all of its compile and gate, and then this
# one is refused rather than queued (so its output is never silently lost).
LOCK_WAIT = 10.0


def locked(out: Path) -> contextlib.AbstractContextManager[None]:
    """One standbyc at a time per output directory (a lock on its parent: no stray file)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    busy = UsageError(f"another standbyc is writing {out}; try again")
    return exclusive(out.parent, busy, LOCK_WAIT)


READ_WAIT = 600.0  # seconds a reader waits for a compile writing the same out/


def read_settled(out: Path) -> Contents:
    """``out/`` as one state, the old tree or the new one: read under a shared lock on the
    lock a compile holds while it stages, swaps and cleans up (``standbyc check`` reads
    this way; a check during a compile waits for it)."""
    if not out.parent.is_dir():
        return read(out)
    busy = UsageError(f"a standbyc compile has been writing {out} for {READ_WAIT:g} s")
    with shared(out.parent, READ_WAIT, busy):
        return read(out)


def recover(out: Path) -> None:
    """Remove what a killed run left: a staged tree, or (from the two-rename swap of
    earlier versions) the old tree, moved back if out/ itself is missing."""
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


def _stage(out: Path, staging: Path, contents: Contents, desired: dict[str, str]) -> list[Path]:
    """Build the staged tree; return the files written into it (not yet flushed to disk)."""
    staging.mkdir()
    theirs = [*contents.foreign, *contents.links, *contents.fifos]
    for rel in theirs:
        if rel in desired:
            raise UsageError(
                f"refusing to overwrite {out.name}/{rel}: it was not written by standbyc "
                "(no generated header); move it away first"
            )
    for rel in contents.foreign:
        _carry(out / rel, staging / rel)
    for rel, link in contents.links.items():
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        (staging / rel).symlink_to(link)
    for rel in contents.dirs:
        (staging / rel).mkdir(parents=True, exist_ok=True)
    for rel in contents.fifos:
        (staging / rel).parent.mkdir(parents=True, exist_ok=True)
        os.mkfifo(staging / rel, stat.S_IMODE((out / rel).lstat().st_mode))
    changed: dict[str, str] = {}
    for rel, text in desired.items():
        if contents.owned.get(rel) == text:
            _carry(out / rel, staging / rel)  # unchanged: no write, no fsync
        else:
            changed[rel] = text
    return write_files(staging, changed)


def write_files(root: Path, files: Mapping[str, str]) -> list[Path]:
    """Write each text under ``root`` at its relative path, as UTF-8 with LF newlines;
    return the files written (not flushed to disk)."""
    written: list[Path] = []
    for rel, text in files.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        with target.open("w", encoding="utf-8", newline="\n") as handle:
            handle.write(text)
        written.append(target)
    return written


def check_target(out: Path, sources: list[Path]) -> Path:
    """The directory to write for ``--out``: refuse what would lose or misplace the user's
    files, follow a symlink to an existing directory."""
    shown = str(out)
    if out.is_symlink():
        if not out.exists():
            raise UsageError(f"--out {shown}: a symlink to {out.readlink()}, which does not exist")
        out = resolved(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out {shown}: exists and is not a directory")
    real = resolved(out)
    here = Path.cwd().resolve()
    if real == Path(real.anchor) or real == here or real in here.parents:
        raise UsageError(
            f"--out {shown}: would replace {real}, which holds the current directory; "
            "name a directory of its own, such as out"
        )
    for src in sources:
        s = resolved(src)
        if s == real or real in s.parents or s in real.parents:
            raise UsageError(
                f"--out {shown} and the spec path {src} contain one another; "
                "keep the output apart from the specs"
            )
    return out


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
    try:
        with locked(out):
            return _replace_locked(out, build, validate)
    except PermissionError as exc:
        raise UsageError(
            f"cannot write {out}: permission denied on {exc.filename or out.parent}"
        ) from None


def _replace_locked(
    out: Path,
    build: Callable[[Contents], dict[str, str]],
    validate: Callable[[Path], None] | None,
) -> bool:
    recover(out)
    contents = read(out)
    desired = build(contents)
    if contents.owned == desired and out.is_dir():
        # Nothing to write: validate what is there (under the lock, so it cannot change).
        if validate is not None:
            validate(out)
        return False
    staging = _sibling(out, "new")
    try:
        written = _stage(out, staging, contents, desired)
        # Written files are durable before the swap makes them out/; the flush (I/O) runs
        # while the gate validates the staged tree (CPU), not before it.
        with ThreadPoolExecutor(max_workers=1) as flusher:
            flushed = flusher.submit(sync_files, written, staging)
            if validate is not None:
                validate(staging)  # if it raises, leaving the block still waits for the flush
            flushed.result()
        if out.exists():
            if not exchange(staging, out):
                raise UsageError(f"{out}: cannot swap directories atomically on this system")
        else:
            staging.rename(out)
        fsync_path(out.parent)
        return True
    finally:
        if staging.exists():  # the old tree after an exchange, or a tree that was refused
            shutil.rmtree(staging)
