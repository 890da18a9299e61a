"""Publish a model directory as a generation into a store directory.

For generation G published after F (the latest so far) this writes
``manifests/G.json``, ``deltas/F-G.delta`` (the weights, diffed against F's anchor,
which the store always keeps for its latest generation), ``anchors/G/`` (G's weights),
``files/<sha256>`` for each other file the store does not hold yet, and
``patches/<old>-<new>.zst`` for a file that changed where the patch is smaller than the
file; then ``index.json`` last and atomically, then removes what the new index no longer
names. A reader therefore sees either the old index with all its files or the new one
with all of its own.

Where the bytes go is a ``StoreWriter``'s (``stores``): ``DirectoryStore`` for a directory,
``S3Store`` for a bucket, where this directory is a local cache of it. The delta is
made against the latest generation's anchor when its bytes are here, else against its
manifest (changed chunks stored whole, not XORed): bigger, never a failure.

The weights are read once, into the new anchor, and the manifest and the delta are made
from that copy; a directory that changed while it was read is refused (``snapshot``).
Which generations and anchors the new index keeps is ``retention``'s; the latest also
gets merged deltas from older generations (``merge_policy``).
"""

from __future__ import annotations

import contextlib
import errno
import json
import shutil
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compiler.fsutil import exclusive, fsync_path
from compiler.weights import DEFAULT_CHUNK, DEFAULT_EXCLUDES
from compiler.weights.diff import diff
from compiler.weights.manifest import (
    MAX_CHUNK,
    MIN_CHUNK,
    Manifest,
    Progress,
    load_manifest,
)
from compiler.weights.sync.errors import StoreError, SyncBusy
from compiler.weights.sync.index import (
    INDEX,
    MAX_GENERATION,
    Delta,
    Generation,
    Index,
    Patch,
    PlainFile,
    StoredFile,
    WeightsInfo,
    blob_path,
    parse_index,
    patch_path,
    read_index,
)
from compiler.weights.sync.merge_policy import MergePolicy, add_merged
from compiler.weights.sync.modeldir import (
    MAX_FILE_SIZE,
    ModelDir,
    dir_digest,
    scan,
    sha256_file,
)
from compiler.weights.sync.patch import PATCH_CAP, make_patch
from compiler.weights.sync.retention import prune
from compiler.weights.sync.signed import SIGNATURE
from compiler.weights.sync.snapshot import (
    Read,
    anchor_sums,
    check_unchanged,
    copy_verified,
    read_directory,
    source_read,
)
from compiler.weights.sync.stores import StoreWriter
from compiler.weights.sync.stores.directory import (
    TMP_MARK,
    DirectoryReader,
    DirectoryStore,
    clean_leftovers,
    remove_unlisted,
    tmp_path,
    write_atomic,
)

# A new anchor once the one-step deltas since the last one pass this share of the weights:
# a standby with no usable weights then pays at most about 1.5 full copies (docs/weight-sync.md).
DEFAULT_DRIFT = 0.5
DEFAULT_ANCHOR_EVERY = 64  # the count cap
DEFAULT_KEEP = 65  # a standby up to 64 generations behind still finds its own weights


@dataclass
class PublishStats:
    generation: int = 0
    digest: str = ""
    already: bool = False  # the generation was published before, with the same digest
    checkpoint_bytes: int = 0  # the weights
    directory_bytes: int = 0  # every file of the model directory
    delta_bytes: int = 0
    delta_from: int | None = None
    delta_base: str = ""  # "anchor": XOR against its bytes; "manifest": its hashes only
    new_store: bool = False  # no index was there: this starts a new history
    anchor_bytes: int = 0
    files: int = 0  # files besides the weights
    files_new: list[str] = field(default_factory=list)  # stored now (new content)
    files_patched: list[str] = field(default_factory=list)  # changed, with a patch
    files_bytes: int = 0  # bytes of the new contents stored
    patch_bytes: int = 0
    pruned: list[str] = field(default_factory=list)
    merged: list[tuple[int, int]] = field(default_factory=list)  # (from, bytes) into this one
    merges: int = 0  # compositions made to choose them
    merge_stopped: str = ""  # why merged deltas reach back less far than the window
    merge_seconds: float = 0.0
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return {
            "generation": self.generation,
            "digest": self.digest,
            "already_published": self.already,
            "checkpoint_bytes": self.checkpoint_bytes,
            "directory_bytes": self.directory_bytes,
            "delta_from": self.delta_from,
            "delta_bytes": self.delta_bytes,
            "delta_base": self.delta_base,
            "new_store": self.new_store,
            "delta_ratio": self.delta_bytes / self.checkpoint_bytes
            if self.checkpoint_bytes
            else 0.0,
            "anchor_bytes": self.anchor_bytes,
            "files": self.files,
            "files_new": self.files_new,
            "files_patched": self.files_patched,
            "files_bytes": self.files_bytes,
            "patch_bytes": self.patch_bytes,
            "pruned": self.pruned,
            "merged": [{"from": f, "bytes": n} for f, n in self.merged],
            "merged_bytes": sum(n for _, n in self.merged),
            "merges": self.merges,
            "merge_stopped": self.merge_stopped,
            "merge_seconds": round(self.merge_seconds, 4),
            "seconds": round(self.seconds, 4),
        }


def _stored(store: Path, rel: str, name: str = "") -> StoredFile:
    path = store / rel
    return StoredFile(rel, path.stat().st_size, sha256_file(path), name)


def anchor_path(store: Path, weights: WeightsInfo, generation: int) -> Path:
    """Where a generation's anchor is, as a checkpoint path the delta library reads."""
    base = store / "anchors" / str(generation)
    return base if weights.sharded else base / weights.names[0]


def _plain_files(
    model: ModelDir,
    store: Path,
    old: Index | None,
    stats: PublishStats,
    sums: list[tuple[str, int, str]],
) -> tuple[PlainFile, ...]:
    """Every file besides the weights, stored by content; a patch from the latest
    generation's file of the same name where it is smaller than the file."""
    previous = {f.name: f for f in old.generations[old.latest].files} if old else {}
    # Named by the index, so in the store (a cache of a remote one may not hold it).
    known = {f.sha256 for g in old.generations.values() for f in g.files} if old else set()
    out: list[PlainFile] = []
    for f, (_, _, sha) in zip(model.files, sums, strict=True):
        blob = store / blob_path(sha)
        if sha not in known and not (blob.is_file() and blob.stat().st_size == f.size):
            with source_read(model):
                copy_verified(f.path, blob, tmp_path(blob), sha, f.size)
            stats.files_new.append(f.name)
            stats.files_bytes += f.size
        patch = None
        before = previous.get(f.name)
        if (
            before is not None
            and before.sha256 != sha
            and max(before.size, f.size) <= PATCH_CAP
            and blob.is_file()  # both versions here: a cache of a remote store may lack one
            and (base := store / blob_path(before.sha256)).is_file()
        ):
            data = make_patch(base.read_bytes(), blob.read_bytes())
            if len(data) < f.size:
                rel = patch_path(before.sha256, sha)
                write_atomic(store / rel, data)
                patch = Patch(before.sha256, _stored(store, rel))
                stats.files_patched.append(f.name)
                stats.patch_bytes += len(data)
        out.append(PlainFile(f.name, f.size, sha, patch))
    return tuple(out)


def _delta_base(store: Path, prev: Generation) -> tuple[Path | None, Manifest | None]:
    """What the delta from ``prev`` is made against: its anchor's bytes when they are in
    ``store``, else its manifest."""
    if all((store / f.path).is_file() for f in prev.anchor) and prev.anchor:
        return anchor_path(store, prev.weights, prev.number), None
    manifest = store / prev.manifest.path
    if not manifest.is_file():
        raise StoreError(
            f"{store}: neither the anchor nor the manifest of generation {prev.number}, the "
            "latest, is there: the store is incomplete"
        )
    return None, load_manifest(manifest)


def check_chunk(chunk: int) -> int:
    if not MIN_CHUNK <= chunk <= MAX_CHUNK or chunk & (chunk - 1):
        raise StoreError(f"--chunk-size {chunk}: must be a power of two from 4096 to 67108864")
    return chunk


@dataclass(frozen=True)
class PublishOptions:
    """How a publish shapes the store (``standbyc weights publish``'s flags)."""

    anchor_every: int = DEFAULT_ANCHOR_EVERY
    keep: int = DEFAULT_KEEP
    chunk: int = DEFAULT_CHUNK  # a new store's; an existing one keeps its own
    anchor_drift: float = DEFAULT_DRIFT
    merge: MergePolicy = MergePolicy()  # noqa: RUF009 (frozen)
    excludes: tuple[str, ...] = DEFAULT_EXCLUDES
    max_file_size: int = MAX_FILE_SIZE
    # An unsigned generation into a store whose latest generation is signed: every
    # verifying standby would refuse it, so only on purpose.
    allow_unsigned: bool = False


def publish(
    new: Path,
    store: Path,
    generation: int,
    options: PublishOptions = PublishOptions(),
    *,
    writer: StoreWriter | None = None,
    progress: Progress | None = None,
) -> PublishStats:
    """Publish model directory ``new`` (or one safetensors file) as ``generation``, into
    ``store`` (through ``writer``: by default the store is that directory)."""
    opts = options
    if opts.anchor_every < 1 or opts.keep < 1:
        raise StoreError("--anchor-every and --keep must be at least 1")
    if not 0 <= opts.anchor_drift <= 100:
        raise StoreError(f"--anchor-drift {opts.anchor_drift}: must be from 0 to 100")
    opts.merge.check()
    if not 1 <= generation <= MAX_GENERATION:
        raise StoreError(f"--generation {generation}: must be from 1 to {MAX_GENERATION}")
    check_chunk(opts.chunk)
    model = scan(new, excludes=opts.excludes, max_file_size=opts.max_file_size)
    t0 = time.perf_counter()
    with _writing(store):
        store.mkdir(parents=True, exist_ok=True)
        with exclusive(store, SyncBusy(f"{store}: another publish is running")):
            clean_leftovers(store)
            sink = writer or DirectoryStore()
            sink.prepare(store)
            before = read_index(DirectoryReader(store))
            if not opts.allow_unsigned:
                _refuse_unsigned(before, model, generation)
            try:
                stats = _publish(_Job(model, store, generation, opts, progress, sink, before))
            except BaseException:
                # Whatever stopped it (a full disk, a bad file) stopped it before the index
                # was replaced: remove what it wrote, temp files and finished ones alike, so
                # the store is as it was and nothing fills it.
                with contextlib.suppress(OSError, StoreError):
                    clean_leftovers(store)
                    remove_unlisted(store, before)
                raise
    stats.seconds = time.perf_counter() - t0
    return stats


def _refuse_unsigned(before: Index | None, model: ModelDir, generation: int) -> None:
    """Refuse an unsigned generation after a signed one: standbys that verify would refuse
    it, one by one, after downloading it."""
    if before is None or any(f.name == SIGNATURE for f in model.files):
        return
    latest = before.generations[before.latest]
    if any(f.name == SIGNATURE for f in latest.files):
        raise StoreError(
            f"generation {generation} is not signed (no {SIGNATURE}), and the store's latest, "
            f"{before.latest}, is: every standby that verifies would refuse it. Sign it "
            "(--sign-key, or a model.sig your pipeline wrote), or publish it unsigned on "
            "purpose (allow_unsigned; the command line's --allow-unsigned)"
        )


@contextlib.contextmanager
def _writing(store: Path) -> Iterator[None]:
    """A store this user cannot write (read-only, or not theirs) is bad input, not a bug."""
    try:
        yield
    except OSError as exc:
        if exc.errno not in (errno.EROFS, errno.EACCES, errno.EPERM):
            raise
        raise StoreError(
            f"{exc.filename or store}: {exc.strerror}; a publish writes {store}: publish "
            "where this user can write, on a file system mounted read-write"
        ) from None


@dataclass(frozen=True)
class _Job:
    model: ModelDir
    store: Path
    generation: int
    options: PublishOptions
    progress: Progress | None
    writer: StoreWriter
    old: Index | None  # the store's index as the publish found it


def _place_anchor(
    store: Path, generation: int, read: Read, sums: list[tuple[str, int, str]]
) -> tuple[StoredFile, ...]:
    final = store / "anchors" / str(generation)
    shutil.rmtree(final, ignore_errors=True)
    read.snapshot.replace(final)
    fsync_path(final.parent)
    return tuple(StoredFile(f"anchors/{generation}/{n}", size, sha, n) for n, size, sha in sums)


def _weights_delta(job: _Job, old: Index, read: Read, stats: PublishStats) -> Delta:
    """The delta from the latest generation to the weights' copy."""
    store, generation = job.store, job.generation
    prev = old.generations[old.latest]
    rel = f"deltas/{prev.number}-{generation}.delta"
    tmp = tmp_path(store / rel)
    tmp.parent.mkdir(parents=True, exist_ok=True)
    base, base_manifest = _delta_base(store, prev)
    diff(read.checkpoint, tmp, old_path=base, base_manifest=base_manifest,
         chunk=old.chunk_size, progress=job.progress)  # fmt: skip
    stats.delta_base = "anchor" if base is not None else "manifest"
    fsync_path(tmp)
    tmp.replace(store / rel)
    fsync_path(tmp.parent)
    delta = Delta(prev.number, _stored(store, rel), prev.weights.digest, read.manifest.digest)
    stats.delta_from, stats.delta_bytes = prev.number, delta.file.size
    return delta


def _publish(job: _Job) -> PublishStats:
    model, store, generation, old = job.model, job.store, job.generation, job.old
    snapshot = tmp_path(store / "anchors" / str(generation))
    read = read_directory(
        model, snapshot, old.chunk_size if old else job.options.chunk, job.progress
    )
    manifest = read.manifest
    digest = dir_digest(manifest.digest, model.weights.names, read.sums)
    stats = PublishStats(
        generation,
        digest,
        checkpoint_bytes=manifest.nbytes,
        directory_bytes=model.size,
        files=len(model.files),
        new_store=old is None,
    )
    if old is not None and generation in old.generations:
        if old.generations[generation].digest != digest:
            raise StoreError(
                f"{store}: generation {generation} is already published with digest "
                f"{old.generations[generation].digest}; {model.root} has {digest}"
            )
        shutil.rmtree(read.snapshot, ignore_errors=True)
        stats.already = True
        return stats
    if old is not None and generation < old.latest:
        raise StoreError(
            f"{store}: generation {generation} is older than the latest, {old.latest}; "
            "generations only grow"
        )
    man_rel = f"manifests/{generation}.json"
    write_atomic(store / man_rel, json.dumps(manifest.to_json(), sort_keys=True).encode())
    # The anchor's sha256 runs beside the diff (both release the GIL).
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="standbyc-anchor") as pool:
        sums = pool.submit(anchor_sums, read, model)
        delta = _weights_delta(job, old, read, stats) if old is not None else None
        anchor = _place_anchor(store, generation, read, sums.result())
    stats.anchor_bytes = sum(f.size for f in anchor)
    files = _plain_files(model, store, old, stats, read.sums)
    check_unchanged(model, read.before)  # the other files were read again as they were stored
    weights = WeightsInfo(
        manifest.digest, model.weights.names, sum(f.size for f in model.weight_files)
    )
    gen = Generation(
        generation, digest, model.size, weights, files, _stored(store, man_rel), delta, anchor
    )
    gens = {**(old.generations if old else {}), generation: gen}
    opts = job.options
    index = Index(manifest.chunk_size, prune(gens, opts.keep, opts.anchor_every, opts.anchor_drift))
    index = _with_merged(job, index, stats)
    data = index.dumps()
    parse_index(data, f"{store / INDEX} (as it would be written)")  # what readers accept
    stats.pruned = job.writer.commit(store, old, index, data)
    return stats


def _with_merged(job: _Job, index: Index, stats: PublishStats) -> Index:
    t0 = time.perf_counter()
    index, report = add_merged(job.store, index, job.options.merge, TMP_MARK)
    stats.merged, stats.merges, stats.merge_stopped = report.kept, report.made, report.stopped
    stats.merge_seconds = time.perf_counter() - t0
    return index
