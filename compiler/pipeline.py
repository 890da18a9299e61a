"""The compile pipeline: load -> check -> plan -> render -> decorate -> order -> tree.

Each step is a small function; ``build_tree`` strings them together and
returns the complete set of files standbyc owns under ``out/``. Writing that
tree (atomically) and validating it are the caller's next steps.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import os
import re
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from compiler import kinds, units, yamlio
from compiler.checks import check_spec
from compiler.decorate import Common, decorate, name_problem, serialize, serialize_text
from compiler.errors import Diagnostic, Location, SpecError, UsageError
from compiler.fsutil import resolved
from compiler.load import LoadedSpec, Positions, display_path, load_text, read_spec
from compiler.plan import Plan, build
from compiler.render import render_all
from compiler.render.base import Emitted, Renderer
from compiler.reuse import store
from compiler.spec import cron_longest_gap

SHARED_SOURCE = "standbyc (shared by all specs)"
CRD_DIR = "crds"
KUSTOMIZATION = "kustomization.yaml"
SPEC_SUFFIXES = (".yaml", ".yml")
SPEC_KIND = "StandbySpec"


@dataclass(frozen=True)
class CompiledSpec:
    plan: Plan
    directory: str  # <namespace>/<name>
    files: dict[str, str]  # path below out/ -> text
    objects: list[Emitted]  # what the files hold, except test data (tests/: only its files)
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


def order(items: Iterable[Emitted]) -> list[Emitted]:
    """Apply order (the kinds table), then name; data files last."""
    return sorted(items, key=lambda e: (kinds.rank(e.kind), e.name, e.relpath))


def kustomization(resource_paths: Sequence[str]) -> dict[str, Any]:
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": list(resource_paths),
    }


def header_source(path: Path, root: Path) -> str:
    """How a file's header names its spec: relative to ``root`` (out/'s parent), so the
    same specs give the same bytes whatever directory standbyc runs from."""
    return Path(os.path.relpath(resolved(path), resolved(root))).as_posix()


def _render(
    plan: Plan, renderer: Renderer, source: str, directory: str, name_location: Location
) -> tuple[list[Emitted], dict[str, str]]:
    """The spec's objects (rendered, decorated, in apply order; not test data) and its
    files (all of them)."""
    common = Common(plan.namespace, plan.labels, plan.annotations)
    emitted = order(decorate(e, common) for e in render_all(plan, renderer))
    if problem := name_problem(emitted):
        raise SpecError.at(name_location, problem)
    files = {
        f"{directory}/{e.relpath}": serialize(e.obj, source, f"{directory}/{e.relpath}")
        if e.text is None
        else serialize_text(e.text, source, f"{directory}/{e.relpath}")
        for e in emitted
    }
    listed = [e.relpath for e in emitted if e.is_resource]
    files[f"{directory}/{KUSTOMIZATION}"] = serialize(
        kustomization(listed), source, f"{directory}/{KUSTOMIZATION}"
    )
    return [e for e in emitted if not e.is_test_data], files


def _cached_render(hit: Any, directory: str) -> tuple[list[Emitted], dict[str, str]] | None:
    """A cache entry as objects and files, or None when it is not one (damaged, or from
    some other program): then the spec is rendered again."""
    if not isinstance(hit, dict):
        return None
    files, objects = hit.get("files"), hit.get("objects")
    if not isinstance(files, dict) or not isinstance(objects, list):
        return None
    inside = (k.startswith(f"{directory}/") and isinstance(v, str) for k, v in files.items())
    if not all(inside):
        return None
    emitted: list[Emitted] = []
    for o in objects:
        if not isinstance(o, dict) or not isinstance(o.get("relpath"), str):
            return None
        if not isinstance(o.get("obj"), dict) or not isinstance(o.get("text"), str | None):
            return None
        emitted.append(Emitted(o["relpath"], o["obj"], text=o["text"]))
    return emitted, files


@dataclass(frozen=True)
class _Loaded:
    """What a spec's text gave: its data and the locations compiling it reports."""

    data: dict[str, Any]
    name_location: Location
    warnings: tuple[Diagnostic, ...]


def _spec_warnings(loaded: LoadedSpec, plan: Plan) -> tuple[Diagnostic, ...]:
    warnings: list[Diagnostic] = []
    metadata = loaded.data.get("metadata")
    if isinstance(metadata, dict) and "namespace" not in metadata:
        warnings.append(
            Diagnostic(
                loaded.positions.locate(loaded.source, ("metadata",)),
                "metadata.namespace is not set, so the objects go to the namespace default",
            )
        )
    if not plan.alerts.rule_labels:
        warnings.append(
            Diagnostic(
                loaded.positions.locate(loaded.source, ("spec", "alerts", "ruleLabels")),
                "spec.alerts.ruleLabels is empty: a Prometheus with a ruleSelector (as "
                "kube-prometheus-stack sets one, release: <its release>) does not load the "
                "PrometheusRule",
            )
        )
    schedule = plan.sync.report_schedule
    if schedule is not None and cron_longest_gap(schedule) is None:
        path = ("spec", "weightSync", "report", "schedule")
        warnings.append(
            Diagnostic(
                loaded.positions.locate(loaded.source, path),
                f"weightSync.report.schedule {schedule!r} runs days apart: after a "
                "Pushgateway restart the weight alerts keep the last pushed values for "
                f"{units.prom_duration(plan.sync.report_bridge_ms)} only, then "
                "StandbyWeightsUnreported pages until the next report",
            )
        )
    warnings += _byte_bandwidths(loaded)
    return tuple(warnings)


# Where a spec writes a bandwidth; a byte unit there is read as bytes, and said once more.
_BANDWIDTH_FIELDS = (
    ("spec", "network", "link"),
    *(("spec", "tiers", t, "egress") for t in ("hot", "warm", "cold")),
    ("spec", "alerts", "bandwidthHigh", "threshold"),
    ("spec", "alerts", "failoverSpike", "threshold"),
    ("spec", "failover", "storeEgress"),
)


def _byte_bandwidths(loaded: LoadedSpec) -> list[Diagnostic]:
    out = []
    for path in _BANDWIDTH_FIELDS:
        node: Any = loaded.data
        for part in path:
            node = node.get(part) if isinstance(node, dict) else None
        if units.in_bytes(node):
            bits = units.human_bits(units.parse_bandwidth(node))
            out.append(
                Diagnostic(
                    loaded.positions.locate(loaded.source, path),
                    f"{node!r} is bytes per second, {bits}: a capital B is a byte. "
                    f"If you meant bits, write {str(node).replace('B', 'b', 1).strip()}",
                )
            )
    return out


def _location_json(loc: Location) -> list[Any]:
    return [loc.file, loc.line, loc.column, loc.path]


def _cached_location(value: Any) -> Location | None:
    if not isinstance(value, list) or len(value) != 4:
        return None
    file, line, column, path = value
    numbers = all(n is None or (isinstance(n, int) and not isinstance(n, bool)) for n in value[1:3])
    if not (isinstance(file, str) and isinstance(path, str) and numbers):
        return None
    return Location(file, line, column, path)


def _cached_loaded(hit: Any) -> _Loaded | None:
    """A cache entry as a ``_Loaded``, or None when it is not one (damaged, or from some
    other program): then the text is parsed again."""
    if not isinstance(hit, dict) or not isinstance(hit.get("data"), dict):
        return None
    name, listed = _cached_location(hit.get("name")), hit.get("warnings")
    if name is None or not isinstance(listed, list):
        return None
    warnings: list[Diagnostic] = []
    for item in listed:
        if not isinstance(item, list) or len(item) != 2 or not isinstance(item[1], str):
            return None
        if (where := _cached_location(item[0])) is None:
            return None
        warnings.append(Diagnostic(where, item[1]))
    return _Loaded(hit["data"], name, tuple(warnings))


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


def _text_key(spec: SpecText, renderer: Renderer) -> str:
    """The key of what a spec's text gave; with the templates in it, a hit means its
    rendering was remembered too (both are stored by the same compile)."""
    return store.key(
        "spec-text", store.code_digest(), renderer.digest, spec.shown, spec.source, spec.text
    )


def _json_exact(data: dict[str, Any]) -> bool:
    """Whether JSON gives ``data`` back unchanged (only then is it remembered)."""
    try:
        return bool(json.loads(json.dumps(data)) == data)
    except (TypeError, ValueError):
        return False


def compile_spec(path: Path, renderer: Renderer, root: Path) -> CompiledSpec:
    return compile_text(read_spec_text(path, root), renderer)


def compile_text(spec: SpecText, renderer: Renderer) -> CompiledSpec:
    shown, source = spec.shown, spec.source
    # The same text (shown under the same name, by the same standbyc) parses to the same
    # data and locations: the YAML parse, most of a warm compile, is skipped then.
    kept = store.Store("compile")
    text_key = _text_key(spec, renderer) if kept.enabled else None
    before = _cached_loaded(kept.get_json(text_key)) if text_key is not None else None
    if before is not None:
        loaded = LoadedSpec(shown, before.data, Positions())
        plan = build(check_spec(loaded), shown)
        name_location, warnings = before.name_location, before.warnings
    else:
        loaded = load_text(spec.text, shown)
        plan = build(check_spec(loaded), shown)
        name_location = loaded.positions.locate(shown, ("metadata", "name"))
        warnings = _spec_warnings(loaded, plan)
        if text_key is not None and _json_exact(loaded.data):
            kept.put_json(
                text_key,
                {
                    "data": loaded.data,
                    "name": _location_json(name_location),
                    "warnings": [[_location_json(w.location), w.message] for w in warnings],
                },
            )
    directory = f"{plan.namespace}/{plan.name}"
    # The rendering depends on nothing but the spec's data, the header's source, standbyc
    # itself and the templates: the same four give the same files (compiler.cache).
    key = hit = None
    if kept.enabled:
        data = json.dumps(loaded.data, default=repr, ensure_ascii=False)
        key = store.key("compile", store.code_digest(), renderer.digest, source, data)
        hit = kept.get_json(key)
    cached = _cached_render(hit, directory)
    if cached is not None:
        emitted, files = cached
    else:
        emitted, files = _render(plan, renderer, source, directory, name_location)
        if key is not None:
            objects = [{"relpath": e.relpath, "obj": e.obj, "text": e.text} for e in emitted]
            kept.put_json(key, {"files": files, "objects": objects})
    return CompiledSpec(plan, directory, files, emitted, name_location, source, warnings)


# From this many specs on, they are compiled by a pool of processes, one per core (starting
# the pool costs about a tenth of a second; rendering a spec about a tenth of a second too).
PARALLEL_FROM = 8
_POOL_JOB: Renderer | None = None  # what forked workers compile with

Problems = tuple[Diagnostic, ...]


def _read_or_problems(path: Path, root: Path) -> SpecText | Problems:
    try:
        return read_spec_text(path, root)
    except SpecError as exc:
        return tuple(exc.diagnostics)


def _compile_or_problems(spec: SpecText, renderer: Renderer) -> CompiledSpec | Problems:
    try:
        return compile_text(spec, renderer)
    except SpecError as exc:
        return tuple(exc.diagnostics)


def _compile_in_worker(spec: SpecText) -> CompiledSpec | Problems:
    assert _POOL_JOB is not None
    return _compile_or_problems(spec, _POOL_JOB)


def _compile_each(
    paths: Sequence[Path], renderer: Renderer, root: Path
) -> list[CompiledSpec | Problems]:
    """Each spec compiled, or its problems; in order."""
    global _POOL_JOB  # noqa: PLW0603 -- read by the forked workers
    texts = [_read_or_problems(p, root) for p in paths]  # each spec file read once
    kept = store.Store("compile")
    # A spec compiled before takes a few milliseconds here, less than a worker takes to
    # send its files back: only the others go to the pool.
    cold = [
        i
        for i, t in enumerate(texts)
        if isinstance(t, SpecText) and not (kept.enabled and kept.has(_text_key(t, renderer)))
    ]
    workers = min(os.cpu_count() or 1, len(cold) // 2)
    compiled: dict[int, CompiledSpec | Problems] = {}
    if len(cold) >= PARALLEL_FROM and workers >= 2 and "fork" in mp.get_all_start_methods():
        _POOL_JOB = renderer
        try:
            with ProcessPoolExecutor(workers, mp_context=mp.get_context("fork")) as pool:
                done = pool.map(_compile_in_worker, [texts[i] for i in cold], chunksize=4)
                compiled = dict(zip(cold, done, strict=True))
        finally:
            _POOL_JOB = None
    out: list[CompiledSpec | Problems] = []
    for i, t in enumerate(texts):
        if not isinstance(t, SpecText):
            out.append(t)  # it could not be read
        else:
            out.append(compiled[i] if i in compiled else _compile_or_problems(t, renderer))
    return out


def compile_specs(paths: Sequence[Path], renderer: Renderer, root: Path) -> list[CompiledSpec]:
    """Compile every spec; report the problems of all of them at once."""
    compiled: list[CompiledSpec] = []
    problems: list[Diagnostic] = []
    seen: dict[str, str] = {}
    for one in _compile_each(paths, renderer, root):
        if isinstance(one, tuple):
            problems.extend(one)
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
    if problems:
        raise SpecError(problems)
    return compiled


def crd_documents(kinds_used: set[str]) -> dict[str, str]:
    """The CRDs standbyc ships for the kinds in use, in the shared ``crds/`` directory."""
    out: dict[str, str] = {}
    listed: list[str] = []
    folder = resources.files("compiler") / "data"
    for kind, crd in sorted(kinds.shipped_crds().items()):
        if kind not in kinds_used:
            continue
        obj = yamlio.parse_one((folder / crd).read_text(encoding="utf-8"))[0]
        e = decorate(Emitted(f"customresourcedefinition-{obj['metadata']['name']}.yaml", obj),
                     Common())  # fmt: skip
        out[f"{CRD_DIR}/{e.relpath}"] = serialize(e.obj, SHARED_SOURCE, f"{CRD_DIR}/{e.relpath}")
        listed.append(e.relpath)
    if listed:
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
    spec_paths: Sequence[Path], renderer: Renderer, owned: dict[str, str], root: Path
) -> tuple[list[CompiledSpec], dict[str, str]]:
    """Compile ``spec_paths`` and merge with the owned files of specs not compiled now.

    An owned file survives only if the spec named in its header (relative to ``root``,
    out/'s parent) still exists and was not part of this compile; shared files are
    always rebuilt.
    """
    compiled = compile_specs(spec_paths, renderer, root)
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
