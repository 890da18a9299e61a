"""What a publish reads of the model directory: the weights once, and proof that nothing
changed meanwhile.

A training job may still be writing the directory when a pipeline publishes it. If the
manifest, the delta and the anchor were each read from the directory, they could describe
three different checkpoints, and the index would promise weights no standby can rebuild.
So the weights are read once, copied into the store as the new generation's anchor, and
the manifest and the delta are made from that copy: the three agree whatever happens to
the directory. A copy taken while a file was being written is torn, so each file's size,
times and inode are compared before the copy and after the last read (a write in place
changes ctime, a rename the inode); any difference, or a file gone, refuses the publish
(exit 2) before the index names anything.
"""

from __future__ import annotations

import hashlib
import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from compiler.fsutil import fsync_path
from compiler.weights.manifest import Manifest, Progress, build_manifest
from compiler.weights.safetensors_io import Checkpoint
from compiler.weights.sync.errors import SourceChanged
from compiler.weights.sync.modeldir import (
    HASH_BLOCK,
    DirFile,
    ModelDir,
    ModelDirError,
    sha256_file,
)

Look = tuple[str, int, int, int, int, int]  # name, size, mtime_ns, ctime_ns, inode, device


def _gone(model: ModelDir, name: str) -> SourceChanged:
    return SourceChanged(
        f"{model.root / name}: disappeared while it was published; nothing was published. "
        "Publish again once the directory is complete"
    )


def looks(model: ModelDir) -> list[Look]:
    """How every file of the directory looks now; a file whose size is no longer the one
    it was read with counts as changed already."""
    out: list[Look] = []
    for f in (*model.weight_files, *model.files):
        try:
            st = f.path.stat()
        except FileNotFoundError:
            raise _gone(model, f.name) from None
        if st.st_size != f.size:
            raise _changed(model, [f.name])
        out.append((f.name, st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, st.st_dev))
    return out


def _changed(model: ModelDir, names: list[str]) -> SourceChanged:
    more = f" (and {len(names) - 1} other file(s))" if len(names) > 1 else ""
    return SourceChanged(
        f"{model.root / names[0]}{more}: changed while it was published; nothing was "
        "published. Publish a directory nothing writes any more (a copy of the training "
        "output, or after its writer finished)"
    )


def check_unchanged(model: ModelDir, before: list[Look]) -> None:
    """Refuse (SourceChanged) if any file looks other than ``before``."""
    now = looks(model)
    changed = [a[0] for a, b in zip(before, now, strict=True) if a != b]
    if changed:
        raise _changed(model, changed)


@contextmanager
def source_read(model: ModelDir) -> Iterator[None]:
    """Reads of the directory: a file gone under them is SourceChanged, not a crash."""
    try:
        yield
    except FileNotFoundError as exc:
        name = _name_of(model, exc.filename)
        if name is None:
            raise  # not the directory's: the store's own
        raise _gone(model, name) from None


def _name_of(model: ModelDir, filename: object) -> str | None:
    if not isinstance(filename, str | bytes | os.PathLike):
        return None
    path = os.fsdecode(filename)
    files: tuple[DirFile, ...] = (*model.weight_files, *model.files)
    found = next((f.name for f in files if os.fspath(f.path) == path), None)
    if found is None and path == os.fspath(model.checkpoint):
        found = model.weights.names[0]
    return found


def copy_weights(model: ModelDir, dest: Path) -> Path:
    """The weights copied into ``dest`` (a new directory), fsynced: the one read of them.
    Returns the checkpoint path the delta library reads there."""
    dest.mkdir(parents=True)
    with source_read(model):
        for f in model.weight_files:
            shutil.copyfile(f.path, dest / f.name)  # copy_file_range where the kernel offers it
            fsync_path(dest / f.name)
    fsync_path(dest)
    return model.weights.checkpoint_in(dest)


@dataclass(frozen=True)
class Read:
    """The model directory as a publish read it: the weights' copy (the new anchor, in a
    temp directory until the index is made), their manifest, every other file's sha256,
    and how each file looked before."""

    snapshot: Path
    checkpoint: Path
    manifest: Manifest
    sums: list[tuple[str, int, str]]  # the other files: name, size, sha256
    before: list[Look]


def read_directory(model: ModelDir, snapshot: Path, chunk: int, progress: Progress | None) -> Read:
    """Copy the weights to ``snapshot`` and hash the copy; hash every other file; refuse
    if anything changed meanwhile."""
    before = looks(model)
    shutil.rmtree(snapshot, ignore_errors=True)
    checkpoint = copy_weights(model, snapshot)
    ckpt = Checkpoint(checkpoint)
    try:
        manifest = build_manifest(ckpt, chunk, progress)
    finally:
        ckpt.close()
    try:
        with source_read(model):
            sums = [(f.name, f.size, sha256_file(f.path, f.size)) for f in model.files]
    except ModelDirError:  # one grew while it was hashed: say so as for any other change
        check_unchanged(model, before)
        raise
    check_unchanged(model, before)
    return Read(snapshot, checkpoint, manifest, sums, before)


def anchor_sums(read: Read, model: ModelDir) -> list[tuple[str, int, str]]:
    """Name, size and sha256 of each file of the weights' copy."""
    return [
        (f.name, (read.snapshot / f.name).stat().st_size, sha256_file(read.snapshot / f.name))
        for f in model.weight_files
    ]


def copy_verified(src: Path, dest: Path, tmp: Path, sha256: str, size: int) -> None:
    """Copy ``src`` to ``dest`` through ``tmp``, hashing what is copied: a file that
    changed since it was hashed is refused, not stored under the wrong name."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    h = hashlib.sha256()
    n = 0
    try:
        with src.open("rb") as fin, tmp.open("wb") as fout:
            while block := fin.read(HASH_BLOCK):
                h.update(block)
                n += len(block)
                if n > size:
                    break
                fout.write(block)
            fout.flush()
            os.fsync(fout.fileno())
        if n != size or h.hexdigest() != sha256:
            raise SourceChanged(
                f"{src}: changed while it was published; nothing was published. Publish a "
                "directory nothing writes any more"
            )
        tmp.replace(dest)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
