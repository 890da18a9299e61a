"""Stage the next model directory beside the target, and swap it in.

Every file of the generation has a ``FileStep`` (``plan_files``): kept (a local file
has its content), patched (from a local file the store's patch applies to), or
downloaded whole. Staging builds the whole next directory in the state's ``work/``: the
weights rebuilt by the delta library (from the local weights or a downloaded anchor,
checked against the index's digest at each step) or linked from the current ones; every
other file linked, patched or moved in, each checked against its sha256. The old
directory is untouched until ``stage_and_swap`` exchanges the two in one atomic step.
"""

from __future__ import annotations

import errno
import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler.fsutil import exchange, fsync_path
from compiler.weights.apply import apply
from compiler.weights.errors import DiskFull, WeightsError
from compiler.weights.manifest import build_manifest
from compiler.weights.safetensors_io import INDEX_NAME, Checkpoint
from compiler.weights.sync.errors import ApplyFailed, DownloadCorrupt, StoreError
from compiler.weights.sync.index import Generation, Index, PlainFile, StoredFile, WeightsInfo
from compiler.weights.sync.patch import PATCH_CAP, apply_patch
from compiler.weights.sync.route import Route
from compiler.weights.sync.standby import Current, StandbyDir
from compiler.weights.sync.verify import Verifier as Verify

KEEP, PATCH, WHOLE = "kept", "patched", "whole"
HOWS = (KEEP, PATCH, WHOLE)


# --- the plan ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FileStep:
    file: PlainFile
    how: str  # KEEP, PATCH or WHOLE
    local: str = ""  # KEEP: the local file with its content; PATCH: the patch's base

    @property
    def download(self) -> StoredFile | None:
        if self.how == WHOLE:
            return self.file.stored
        if self.how == PATCH and self.file.patch is not None:
            return self.file.patch.file
        return None


def plan_files(gen: Generation, current: Current) -> list[FileStep]:
    have = current.by_sha()
    out = []
    for f in gen.files:
        if f.sha256 in have:
            out.append(FileStep(f, KEEP, have[f.sha256]))
        elif f.patch is not None and f.patch.base_sha256 in have and f.size <= PATCH_CAP:
            out.append(FileStep(f, PATCH, have[f.patch.base_sha256]))
        else:
            out.append(FileStep(f, WHOLE))
    return out


# --- staging -------------------------------------------------------------------------------


def _link_or_copy(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dest)
    except OSError as exc:
        if exc.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP):
            raise
        shutil.copyfile(src, dest)


def _assemble_anchor(
    local: StandbyDir, index: Index, anchor: Generation, got: dict[str, Path]
) -> Path:
    """The downloaded anchor as a checkpoint in work/, checked against its digest."""
    where = local.work / f"anchor-{anchor.number}"
    where.mkdir(parents=True)
    for f in anchor.anchor:
        got[f.path].replace(where / f.name)
    path = _checkpoint_in(where, anchor.weights.names)
    ckpt = Checkpoint(path)
    try:
        digest = build_manifest(ckpt, index.chunk_size).digest
    finally:
        ckpt.close()
    if digest != anchor.weights.digest:
        raise DownloadCorrupt(
            f"anchor {anchor.number}: checkpoint digest {digest}, the index says "
            f"{anchor.weights.digest}"
        )
    return path


def _checkpoint_in(directory: Path, names: tuple[str, ...]) -> Path:
    """The checkpoint path the delta library reads for weights ``names`` in ``directory``."""
    return directory if names[0] == INDEX_NAME else directory / names[0]


def _out_path(local: StandbyDir, name: str, weights: WeightsInfo) -> Path:
    """A fresh checkpoint path in work/ for the delta library to write."""
    where = local.work / name
    if weights.sharded:
        return where
    where.mkdir(parents=True, exist_ok=True)
    return where / weights.names[0]


@dataclass(frozen=True)
class Stage:
    """One update: what the standby holds, the plan, and the verified downloads."""

    local: StandbyDir
    index: Index
    route: Route
    steps: list[FileStep]
    current: Current
    got: dict[str, Path]
    verify: Verify | None = None


def _stage_weights(st: Stage, nxt: Path) -> None:
    local, index, route, current, got = st.local, st.index, st.route, st.current, st.got
    gen = index.generations[route.target]
    names = gen.weights.names
    if route.keeps_local:
        # Same checkpoint digest: the same bytes (a lone file's name may differ).
        for have, want in zip(current.weights_names, names, strict=True):
            _link_or_copy(local.target / have, nxt / want)
        return
    if route.anchor is not None:
        base = _assemble_anchor(local, index, route.anchor, got)
    else:
        base = _checkpoint_in(local.target, current.weights_names)
    for gen_step in route.deltas:
        assert gen_step.delta is not None
        out = _out_path(local, f"gen-{gen_step.number}", gen_step.weights)
        stats = apply(base, got[gen_step.delta.file.path], out)
        if stats.target_digest != gen_step.weights.digest:
            raise ApplyFailed(
                f"{gen_step.delta.file.path}: rebuilt weights with digest "
                f"{stats.target_digest}, the index says {gen_step.weights.digest}"
            )
        base = out
    if gen.weights.sharded:
        for name in names:
            (base / name).replace(nxt / name)
    else:
        base.replace(nxt / names[0])


def _stage_files(local: StandbyDir, steps: list[FileStep], got: dict[str, Path], nxt: Path) -> None:
    placed: dict[str, Path] = {}  # store path -> where its download went first
    for s in steps:
        dest = nxt / s.file.name
        dest.parent.mkdir(parents=True, exist_ok=True)
        if s.how == KEEP:
            _link_or_copy(local.target / s.local, dest)
        elif s.how == PATCH:
            assert s.file.patch is not None
            base = (local.target / s.local).read_bytes()
            if _sha(base) != s.file.patch.base_sha256:
                raise ApplyFailed(f"{local.target / s.local}: changed during the sync")
            out = apply_patch(base, got[s.file.patch.file.path].read_bytes(), s.file.size,
                              s.file.patch.file.path)  # fmt: skip
            if _sha(out) != s.file.sha256:
                raise ApplyFailed(
                    f"{s.file.patch.file.path}: the patched {s.file.name} does not have the "
                    "sha256 the index gives"
                )
            _write(dest, out)
        else:
            path = s.file.stored.path
            if path in placed:
                _link_or_copy(placed[path], dest)
            else:
                got[path].replace(dest)
                placed[path] = dest


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _write(path: Path, data: bytes) -> None:
    with path.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _check_staged(nxt: Path, gen: Generation) -> None:
    """The staged directory holds exactly the generation's files, at their sizes (their
    bytes were each verified as they were placed)."""
    want = dict.fromkeys(gen.weights.names) | {f.name: f.size for f in gen.files}
    have: dict[str, int] = {}
    for root, _, files in os.walk(nxt):
        for name in files:
            path = Path(root) / name
            have[path.relative_to(nxt).as_posix()] = path.stat().st_size
    if set(have) != set(want):
        extra = sorted(set(have) ^ set(want))
        raise ApplyFailed(f"{nxt}: the staged directory differs from the index at {extra[:3]}")
    for name, size in want.items():
        if size is not None and have[name] != size:
            raise ApplyFailed(f"{nxt / name}: {have[name]} bytes, the index says {size}")
    if sum(have[n] for n in gen.weights.names) != gen.weights.size:
        raise ApplyFailed(f"{nxt}: the weights' size differs from the index")


def _swap(nxt: Path, target: Path) -> None:
    """Make the staged directory the target in one atomic step."""
    for d in (nxt, *[p for p in nxt.rglob("*") if p.is_dir()]):
        fsync_path(d)
    if target.is_symlink() or (target.exists() and not target.is_dir()):
        raise StoreError(f"{target}: not a directory; the model directory must be one")
    if target.exists():
        if not exchange(nxt, target):
            raise ApplyFailed(f"{target}: cannot swap directories atomically on this system")
        fsync_path(target.parent)
        shutil.rmtree(nxt, ignore_errors=True)  # the old directory, now at the staged path
    else:
        target.parent.mkdir(parents=True, exist_ok=True)
        nxt.replace(target)
        fsync_path(target.parent)


def stage_and_swap(st: Stage) -> dict[str, Any] | None:
    local = st.local
    gen = st.index.generations[st.route.target]
    nxt = local.work / "next"
    nxt.mkdir(parents=True)
    nxt.chmod(0o755)
    try:
        _stage_weights(st, nxt)
        _stage_files(local, st.steps, st.got, nxt)
        _check_staged(nxt, gen)
    except (DownloadCorrupt, ApplyFailed):
        raise
    except DiskFull as exc:
        raise DiskFull(f"{exc}; the old directory is kept") from None
    except WeightsError as exc:
        raise ApplyFailed(f"{local.target}: {exc}; the old directory is kept") from None
    verified = st.verify.check(local, nxt, gen.number) if st.verify else None  # or refused
    _swap(nxt, local.target)
    return verified
