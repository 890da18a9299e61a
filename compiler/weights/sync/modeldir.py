"""A model directory: the unit a generation is.

What an engine loads is a directory: the safetensors weights (one file, or shards and
their index) and every other file beside them (``config.json``, the tokenizer, the chat
template, ...). ``scan`` reads such a directory and refuses what cannot be one: a
symlink out of it, a device or a FIFO, a file over the cap, a name that would escape a
target. The same name rule checks the names an index brings over the network.

The weights are, in this order of precedence: the shards ``model.safetensors.index.json``
names (with the index); ``model.safetensors``; the only ``*.safetensors`` file at the top
level. They travel as tensor deltas; every other file (a ``.safetensors`` file the index
does not name included) travels as bytes: not at all when unchanged, else whole or as a
byte patch.
"""

from __future__ import annotations

import fnmatch
import hashlib
import json
import os
import stat
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from compiler.weights import DEFAULT_EXCLUDES
from compiler.weights.errors import WeightsError
from compiler.weights.manifest import h128
from compiler.weights.safetensors_io import INDEX_NAME

SINGLE_NAME = "model.safetensors"
MAX_FILES = 10_000
MAX_FILE_SIZE = 4 << 30  # a file that is not the weights; --max-file-size raises it
MAX_NAME = 1024
MAX_PART = 255
MAX_DEPTH = 16
HASH_BLOCK = 8 << 20


class ModelDirError(WeightsError):
    """A directory (or an index) holds something that cannot be part of a model
    directory (exit 2)."""


def check_name(name: object, where: str) -> str:
    """``name`` as a relative path inside a model directory, or ModelDirError: no
    absolute path, no ``.`` or ``..`` part, no backslash or control character."""
    if not isinstance(name, str) or not name:
        raise ModelDirError(f"{where}: a file name must be a non-empty string")
    parts = name.split("/")
    bad = (
        len(name) > MAX_NAME
        or len(parts) > MAX_DEPTH
        or any(p in ("", ".", "..") or len(p.encode()) > MAX_PART for p in parts)
        or "\\" in name
        or any(ord(c) < 0x20 or ord(c) == 0x7F for c in name)
    )
    if bad:
        raise ModelDirError(
            f"{where}: {name!r} cannot be a file in a model directory (a relative path of at "
            f"most {MAX_DEPTH} parts and {MAX_NAME} characters, without '.', '..', empty "
            "parts, backslashes or control characters)"
        )
    return name


def check_tree(names: Iterable[str], where: str) -> None:
    """No name twice, and no file where another name needs a directory."""
    seen: set[str] = set()
    dirs: set[str] = set()
    for name in names:
        if name in seen:
            raise ModelDirError(f"{where}: {name!r} is listed twice")
        seen.add(name)
        parts = name.split("/")
        dirs.update("/".join(parts[:i]) for i in range(1, len(parts)))
    clash = sorted(seen & dirs)
    if clash:
        raise ModelDirError(f"{where}: {clash[0]!r} is both a file and a directory")


@dataclass(frozen=True)
class Weights:
    """Which files of a model directory are its safetensors weights."""

    names: tuple[str, ...]  # the index first when sharded, then the shards

    @property
    def sharded(self) -> bool:
        return self.names[0] == INDEX_NAME

    def checkpoint_in(self, directory: Path) -> Path:
        """The checkpoint path the delta library reads, for these weights in ``directory``."""
        return directory if self.sharded else directory / self.names[0]


@dataclass(frozen=True)
class DirFile:
    name: str  # relative, with '/'
    path: Path  # where to read it (a symlink inside the directory: its target)
    size: int


@dataclass(frozen=True)
class ModelDir:
    root: Path
    weights: Weights
    weight_files: tuple[DirFile, ...]
    files: tuple[DirFile, ...]  # every other file, sorted by name

    @property
    def checkpoint(self) -> Path:
        return self.weights.checkpoint_in(self.root)

    @property
    def size(self) -> int:
        return sum(f.size for f in (*self.weight_files, *self.files))


def _excluded(name: str, patterns: Sequence[str]) -> bool:
    parts = name.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    return any(fnmatch.fnmatchcase(p, pat) for pat in patterns for p in prefixes)


def _walk(root: Path, real_root: str, excludes: Sequence[str]) -> list[DirFile]:
    out: list[DirFile] = []
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        try:
            entries = sorted(os.scandir(root / rel_dir), key=lambda e: e.name)
        except OSError as exc:
            raise ModelDirError(f"{root / rel_dir}: cannot list: {exc.strerror}") from None
        for entry in entries:
            name = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
            if _excluded(name, excludes):
                continue
            where = root / name
            check_name(name, str(root))
            st = entry.stat(follow_symlinks=False)
            path = Path(entry.path)
            if stat.S_ISLNK(st.st_mode):
                path, st = _inside(where, real_root)
            if stat.S_ISDIR(st.st_mode):
                stack.append(name)
            elif stat.S_ISREG(st.st_mode):
                out.append(DirFile(name, path, st.st_size))
                if len(out) > MAX_FILES:
                    raise ModelDirError(f"{root}: more than {MAX_FILES} files")
            else:
                raise ModelDirError(
                    f"{where}: a {_kind(st.st_mode)} cannot be part of a model directory"
                )
    return sorted(out, key=lambda f: f.name)


def _inside(link: Path, real_root: str) -> tuple[Path, os.stat_result]:
    """A symlink's target, if it is a regular file inside the directory."""
    target = os.path.realpath(link)
    if os.path.commonpath([real_root, target]) != real_root:
        raise ModelDirError(
            f"{link}: a symlink to {link.readlink()}, outside the model directory; publish "
            "a directory of real files (a Hugging Face cache snapshot is all such links: "
            "`huggingface-cli download --local-dir DIR`, or `cp -rL`, gives one)"
        )
    try:
        st = Path(target).stat()
    except OSError:
        raise ModelDirError(
            f"{link}: a symlink to {link.readlink()}, which does not exist"
        ) from None
    if not stat.S_ISREG(st.st_mode):
        raise ModelDirError(
            f"{link}: a symlink to a {_kind(st.st_mode)}; only links to regular files inside "
            "the directory are followed"
        )
    return Path(target), st


def _kind(mode: int) -> str:
    for test, what in (
        (stat.S_ISDIR, "directory"),
        (stat.S_ISFIFO, "FIFO"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISSOCK, "socket"),
        (stat.S_ISLNK, "symlink"),
    ):
        if test(mode):
            return what
    return "special file"


def select_weights(top_level: Iterable[str], where: str) -> Weights:
    """Which top-level files are the weights; ``top_level`` are the regular files there."""
    names = set(top_level)
    if INDEX_NAME in names:
        return Weights((INDEX_NAME,))  # the shards come from the index (Checkpoint reads it)
    if SINGLE_NAME in names:
        return Weights((SINGLE_NAME,))
    found = sorted(n for n in names if n.endswith(".safetensors"))
    if len(found) == 1:
        return Weights((found[0],))
    if not found:
        raise ModelDirError(
            f"{where}: no safetensors weights (model.safetensors, or {INDEX_NAME} and the "
            "shards it names)"
        )
    raise ModelDirError(
        f"{where}: {len(found)} .safetensors files and neither {INDEX_NAME} nor "
        f"{SINGLE_NAME}: which of them are the weights? ({', '.join(found[:4])})"
    )


def scan(
    root: Path,
    *,
    excludes: Sequence[str] = DEFAULT_EXCLUDES,
    max_file_size: int = MAX_FILE_SIZE,
) -> ModelDir:
    """Read a model directory (or one safetensors file, a directory of that file alone)."""
    try:
        st = root.stat()
    except OSError as exc:
        raise ModelDirError(f"{root}: {exc.strerror}") from None
    if stat.S_ISREG(st.st_mode):
        if root.suffix != ".safetensors":
            raise ModelDirError(f"{root}: not a directory or a .safetensors file")
        only = DirFile(check_name(root.name, str(root)), root, st.st_size)
        return ModelDir(root.parent, Weights((root.name,)), (only,), ())
    if not stat.S_ISDIR(st.st_mode):
        raise ModelDirError(f"{root}: a {_kind(st.st_mode)}, not a model directory")
    files = _walk(root, os.path.realpath(root), excludes)
    weights = select_weights((f.name for f in files if "/" not in f.name), str(root))
    if weights.sharded:
        weights = Weights((INDEX_NAME, *_shards(root / INDEX_NAME)))
    by_name = {f.name: f for f in files}
    missing = [n for n in weights.names if n not in by_name]
    if missing:
        raise ModelDirError(f"{root / INDEX_NAME}: names {missing[0]!r}, which is not in {root}")
    chosen = set(weights.names)
    plain = tuple(f for f in files if f.name not in chosen)
    for f in plain:
        if f.size > max_file_size:
            raise ModelDirError(
                f"{root / f.name}: {f.size} bytes, over the cap of {max_file_size} for a file "
                "that is not the safetensors weights (leave it out with --exclude, or raise "
                "--max-file-size)"
            )
    return ModelDir(root, weights, tuple(by_name[n] for n in weights.names), plain)


def _shards(index: Path) -> list[str]:
    """The shard names an index maps tensors to (their checks are the delta library's)."""
    try:
        doc = json.loads(index.read_bytes())
        shards = sorted(set(doc["weight_map"].values()))
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise ModelDirError(f"{index}: not a safetensors index ({exc})") from None
    for s in shards:
        if not isinstance(s, str) or "/" in check_name(s, str(index)):
            raise ModelDirError(f"{index}: shard {s!r} must be a file beside the index")
    return shards


def sha256_file(path: Path, cap: int | None = None) -> str:
    """sha256 of a regular file; with ``cap``, refuse one that grew beyond it."""
    h = hashlib.sha256()
    n = 0
    fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ModelDirError(f"{path}: not a regular file")
        while block := os.read(fd, HASH_BLOCK):
            n += len(block)
            if cap is not None and n > cap:
                raise ModelDirError(f"{path}: grew beyond {cap} bytes while it was read")
            h.update(block)
    finally:
        os.close(fd)
    return h.hexdigest()


def dir_digest(
    weights_digest: str, weight_names: Sequence[str], files: Iterable[tuple[str, int, str]]
) -> str:
    """The digest of a whole model directory (xxh3-128, hex): the weights' checkpoint
    digest and file names, and every other file's name, size and sha256."""
    doc = {
        "format": "standbyc-model-directory",
        "weights": {"digest": weights_digest, "files": list(weight_names)},
        "files": sorted([n, s, h] for n, s, h in files),
    }
    return h128(json.dumps(doc, sort_keys=True, separators=(",", ":")).encode()).hex()
