"""The compile pipeline: load -> admit -> plan -> render -> decorate -> order -> tree.

Each step is a small function; ``compile_text`` strings them together for one spec and
``build_tree`` for all of them, returning the complete set of files standbyc owns under
``out/``. Writing that tree (atomically) and validating it are the caller's next steps.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from importlib import resources
from pathlib import Path
from typing import cast

from compiler import kinds, yamlio
from compiler.admit import admit
from compiler.decorate import KUSTOMIZATION, Common, decorate, kustomization, serialize, written
from compiler.emitted import Emitted
from compiler.errors import Diagnostic, Location, SpecError, UsageError
from compiler.forkmap import fork_map
from compiler.fsutil import resolved
from compiler.load import LoadedSpec, Positions, display_path, load_text, read_spec
from compiler.plan import Plan
from compiler.plan.builders import build
from compiler.render import render_all
from compiler.render.base import Renderer
from compiler.reuse.compiled import Parsed, SpecMemo

SHARED_SOURCE = "standbyc (shared by all specs)"
CRD_DIR = "crds"
SPEC_SUFFIXES = (".yaml", ".yml")
SPEC_KIND = "StandbySpec"


@dataclass(frozen=True)
class CompiledSpec:
    plan: Plan
    directory: str  # <namespace>/<name>
    files: dict[str, str]  # path below out/ -> text
    objects: list[Emitted]  # what the files hold (``is_resource``: what is applied)
    name_location: Location
    header_source: str  # the spec as each file's header names it
    warnings: tuple[Diagnostic, ...] = ()


_KIND_LINE = re.compile(rb"^kind:[ \t]*['\"]?([A-Za-z0-9]+)", re.MULTILINE)


def declared_kind(path: Path) -> str | None:
    """The top-level ``kind:`` a YAML file declares, read as text (None: none, or unreadable)."""
    try:
        with path.open("rb") as f:
            head = f.read(1 << 20)
    except OSError:
        return None
    match = _KIND_LINE.search(head)
    return match.group(1).decode() if match else None


@dataclass(frozen=True)
class Discovery:
    specs: list[Path]
    skipped: list[tuple[Path, str]]  # YAML files in spec directories that are not specs


def discover_specs(paths: Sequence[Path]) -> Discovery:
    """Spec files named on the command line, or found (recursively) in named directories.

    In a directory, a YAML file that declares another kind (a kustomization.yaml, say) is
    skipped, and said so; a named file is always compiled."""
    found: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    for path in paths:
        if path.is_dir():
            if not os.access(path, os.R_OK | os.X_OK):
                raise UsageError(f"{path}: cannot read this directory (permission denied)")
            for p in sorted(path.rglob("*")):
                if p.suffix not in SPEC_SUFFIXES or not p.is_file():
                    continue
                kind = declared_kind(p)
                if kind is None or kind == SPEC_KIND:
                    found.append(p)
                else:
                    skipped.append((p, kind))
        elif path.is_file():
            found.append(path)
        elif path.exists():
            raise UsageError(f"{path}: not a regular file or a directory (a FIFO or a device?)")
        else:
            raise UsageError(f"{path}: no such file or directory")
    if not found:
        raise UsageError(f"no spec files (*.yaml) found in {', '.join(map(str, paths))}")
    unique: dict[Path, Path] = {}
    for p in found:
        unique.setdefault(resolved(p), p)
    return Discovery(list(unique.values()), skipped)


def discover(paths: Sequence[Path]) -> list[Path]:
    return discover_specs(paths).specs


def header_source(path: Path, root: Path) -> str:
    """How a file's header names its spec: relative to ``root`` (out/'s parent), so the
    same specs give the same bytes whatever directory standbyc runs from."""
    return Path(os.path.relpath(resolved(path), resolved(root))).as_posix()


@dataclass(frozen=True)
class SpecText:
    """A spec file as read, once: the name it is shown under, the source its files'
    headers name (relative to out/'s parent), its text."""

    shown: str
    source: str
    text: str


def read_spec_text(path: Path, root: Path) -> SpecText:
    shown = display_path(path)
    return SpecText(shown, header_source(path, root), read_spec(path, shown))


def compile_spec(path: Path, renderer: Renderer, root: Path) -> CompiledSpec:
    return compile_cached(read_spec_text(path, root), renderer)


def compile_text(spec: SpecText, renderer: Renderer) -> CompiledSpec:
    """One spec's files from its text alone: load -> admit -> plan -> render -> decorate.
    Nothing is looked up or remembered (``compile_cached`` is this with the compile's
    cache around it)."""
    loaded = load_text(spec.text, spec.shown)
    admitted = admit(loaded)
    plan = build(admitted.spec, spec.shown)
    emitted, files = _render(plan, renderer, spec.source, admitted.name_location)
    return CompiledSpec(
        plan, _directory(plan), files, emitted, admitted.name_location, spec.source,
        admitted.warnings,
    )  # fmt: skip


def compile_cached(spec: SpecText, renderer: Renderer) -> CompiledSpec:
    """``compile_text``, wrapped once by the compile's cache (``compiler.reuse.compiled``)
    around its two costly steps: the same text (shown under the same name, by the same
    standbyc) is not loaded again, its warnings and locations are as they were, and the
    same data is not rendered again. Admission and the plan always run."""
    memo = SpecMemo(renderer.digest)
    before = memo.parsed(spec.shown, spec.source, spec.text)
    if before is None:
        admitted = admit(load_text(spec.text, spec.shown))
    else:
        again = admit(LoadedSpec(spec.shown, before.data, Positions()))
        admitted = replace(again, name_location=before.name_location, warnings=before.warnings)
    plan = build(admitted.spec, spec.shown)
    if before is None:
        parsed = Parsed(admitted.data, admitted.name_location, admitted.warnings)
        memo.remember_parsed(spec.shown, spec.source, spec.text, parsed)
    rendering = memo.rendering(spec.source, admitted.data, _directory(plan))
    if rendering is None:
        rendering = _render(plan, renderer, spec.source, admitted.name_location)
        memo.remember_rendering(spec.source, admitted.data, *rendering)
    emitted, files = rendering
    return CompiledSpec(
        plan, _directory(plan), files, emitted, admitted.name_location, spec.source,
        admitted.warnings,
    )  # fmt: skip


def _directory(plan: Plan) -> str:
    return f"{plan.namespace}/{plan.name}"


def _render(
    plan: Plan, renderer: Renderer, source: str, name_location: Location
) -> tuple[list[Emitted], dict[str, str]]:
    """The spec's objects (rendered, decorated, in apply order), the validators' test
    data among them, and its files."""
    rendered = render_all(plan, renderer)
    common = Common(plan.namespace, plan.labels, plan.annotations)
    return written(rendered, common, source, _directory(plan), name_location)


# From this many specs on, they are compiled by a pool of processes, one per core (starting
# the pool costs about a tenth of a second; rendering a spec about a tenth of a second too).
PARALLEL_FROM = 8

Problems = tuple[Diagnostic, ...]


def _read_or_problems(path: Path, root: Path) -> SpecText | Problems:
    try:
        return read_spec_text(path, root)
    except SpecError as exc:
        return tuple(exc.diagnostics)


def _compile_or_problems(spec: SpecText, renderer: Renderer) -> CompiledSpec | Problems:
    try:
        return compile_cached(spec, renderer)
    except SpecError as exc:
        return tuple(exc.diagnostics)


def _compile_each(
    paths: Sequence[Path], renderer: Renderer, root: Path
) -> list[CompiledSpec | Problems]:
    """Each spec compiled, or its problems; in order."""
    texts = [_read_or_problems(p, root) for p in paths]  # each spec file read once
    memo = SpecMemo(renderer.digest)
    # A spec compiled before takes a few milliseconds here, less than a worker takes to
    # send its files back: only the others go to the pool.
    cold = [
        i
        for i, t in enumerate(texts)
        if isinstance(t, SpecText) and not memo.seen(t.shown, t.source, t.text)
    ]
    done = fork_map(
        functools.partial(_compile_or_problems, renderer=renderer),
        [cast(SpecText, texts[i]) for i in cold],
        min_items=PARALLEL_FROM,
    )
    compiled: dict[int, CompiledSpec | Problems] = dict(zip(cold, done, strict=True))
    out: list[CompiledSpec | Problems] = []
    for i, t in enumerate(texts):
        if not isinstance(t, SpecText):
            out.append(t)  # it could not be read
        else:
            out.append(compiled[i] if i in compiled else _compile_or_problems(t, renderer))
    return out


def compile_specs(
    paths: Sequence[Path],
    renderer: Renderer,
    root: Path,
    left_out: list[Diagnostic] | None = None,
) -> list[CompiledSpec]:
    """Compile every spec; report the problems of all of them at once. Given ``left_out``,
    a spec with problems is left out and its problems put there instead, unless no spec
    compiles at all."""
    compiled: list[CompiledSpec] = []
    problems: list[Diagnostic] = []
    seen: dict[str, str] = {}
    for one in _compile_each(paths, renderer, root):
        if isinstance(one, tuple):
            (problems if left_out is None else left_out).extend(one)
            continue
        if one.directory in seen:
            problems.append(
                Diagnostic(
                    one.name_location,
                    f"{one.directory} is already defined by {seen[one.directory]}",
                )
            )
            continue
        seen[one.directory] = one.plan.source
        compiled.append(one)
    if problems or (left_out and not compiled):
        raise SpecError(problems or left_out or [])
    return compiled


def crd_objects(kinds_used: set[str]) -> list[Emitted]:
    """The CRDs standbyc ships for the kinds in use (relpaths below ``crds/``)."""
    out: list[Emitted] = []
    folder = resources.files("compiler") / "data"
    for kind, crd in sorted(kinds.shipped_crds().items()):
        if kind in kinds_used:
            obj = yamlio.parse_one((folder / crd).read_text(encoding="utf-8"))[0]
            name = f"customresourcedefinition-{obj['metadata']['name']}.yaml"
            out.append(decorate(Emitted(name, obj), Common()))
    return out


def crd_documents(kinds_used: set[str]) -> dict[str, str]:
    """The shared ``crds/`` directory: the CRDs in use and their kustomization."""
    out = {
        f"{CRD_DIR}/{e.relpath}": serialize(e.obj, SHARED_SOURCE, f"{CRD_DIR}/{e.relpath}")
        for e in crd_objects(kinds_used)
    }
    if out:
        listed = [p.split("/", 1)[1] for p in out]
        out[f"{CRD_DIR}/{KUSTOMIZATION}"] = serialize(
            kustomization(listed), SHARED_SOURCE, f"{CRD_DIR}/{KUSTOMIZATION}"
        )
    return out


def assemble(compiled: Sequence[CompiledSpec], kept: dict[str, str]) -> dict[str, str]:
    """The whole owned tree: compiled specs, files kept from other specs, shared files."""
    files = dict(kept)
    for one in compiled:
        files.update(one.files)
    spec_dirs = sorted(
        {
            p.rsplit("/", 1)[0]
            for p in files
            if p.endswith("/" + KUSTOMIZATION) and p.count("/") == 2
        }
    )
    # Kinds in use: the compiled objects, and of the kinds a CRD is shipped for, those a
    # kept file holds (standbyc's own emitter writes ``kind:`` unindented, on a line of its
    # own, never the first: that is the header).
    used = {e.kind for one in compiled for e in one.objects}
    for kind in kinds.shipped_crds().keys() - used:
        line = f"\nkind: {kind}\n"
        if any(line in text for text in kept.values()):
            used.add(kind)
    crds = crd_documents(used)
    files.update(crds)
    root = ([CRD_DIR] if crds else []) + spec_dirs
    files[KUSTOMIZATION] = serialize(kustomization(root), SHARED_SOURCE, KUSTOMIZATION)
    return dict(sorted(files.items()))


def build_tree(
    spec_paths: Sequence[Path],
    renderer: Renderer,
    owned: dict[str, str],
    root: Path,
    left_out: list[Diagnostic] | None = None,
) -> tuple[list[CompiledSpec], dict[str, str]]:
    """Compile ``spec_paths`` and merge with the owned files of specs not compiled now.

    An owned file survives only if the spec named in its header (relative to ``root``,
    out/'s parent) still exists and was not part of this compile; shared files are
    always rebuilt.
    """
    compiled = compile_specs(spec_paths, renderer, root, left_out)
    sources = {c.header_source for c in compiled}  # (compile_specs raised if one failed)
    kept: dict[str, str] = {}
    exists: dict[str, bool] = {}  # each spec looked up once, not once per file
    for rel, text in owned.items():
        src = yamlio.source_of(text)
        if src is None or src == SHARED_SOURCE or src in sources:
            continue
        if src not in exists:
            exists[src] = (root / src).is_file()
        if exists[src]:
            kept[rel] = text
    return compiled, assemble(compiled, kept)
