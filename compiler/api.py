"""The compile API: the one entry point that the CLI, the Argo CD plugin, the bench and
the tests call.

``compile_tree`` discovers the specs, compiles them, merges the result with the files
``out/`` already holds for other specs, runs the validation gate on the staged tree and
swaps it in atomically. With ``write=False`` it only computes what ``out/`` should hold
(``standbyc check``, the plugin's stream, property tests). Spec problems and gate
findings come back in the ``Result``; only usage errors, missing tools and broken
templates raise.
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from compiler import decorate, kinds, outdir, pipeline
from compiler.emitted import Emitted
from compiler.errors import Diagnostic, SpecError, StandbycError
from compiler.gate import Report
from compiler.gate.schema_sources import normalize_version
from compiler.render.base import Renderer
from compiler.validation import run_gate

DEFAULT_SPECS = Path("specs")


@dataclass(frozen=True)
class Changes:
    """How the owned files of ``out/`` differ from what the specs compile to."""

    added: tuple[str, ...] = ()
    changed: tuple[str, ...] = ()
    removed: tuple[str, ...] = ()

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(sorted((*self.added, *self.changed, *self.removed)))

    @classmethod
    def between(cls, before: dict[str, str], after: dict[str, str]) -> Changes:
        return cls(
            added=tuple(p for p in after if p not in before),
            changed=tuple(p for p in after if p in before and before[p] != after[p]),
            removed=tuple(p for p in before if p not in after),
        )


@dataclass(frozen=True)
class Result:
    out: Path
    specs: tuple[pipeline.CompiledSpec, ...] = ()
    files: dict[str, str] = field(default_factory=dict)  # owned tree out/ should hold
    current: dict[str, str] = field(default_factory=dict)  # owned files out/ held before
    changes: Changes = Changes()
    written: bool = False  # out/ was replaced
    report: Report | None = None  # the gate's report; None when not validated
    diagnostics: tuple[Diagnostic, ...] = ()  # spec problems: nothing was written
    compile_seconds: float = 0.0
    write_seconds: float = 0.0  # staging, gate and swap
    strict: bool = False  # --strict: every missed failover objective is an error
    skipped: tuple[str, ...] = ()  # files in spec directories that are not specs
    part: str = "all"  # what the stream holds (``stream``); cluster: only what specs share
    left_out: tuple[Diagnostic, ...] = ()  # part cluster: problems of the specs left out

    @property
    def warnings(self) -> list[str]:
        """Things the user should know that did not stop the compile."""
        out = [f"{path}: skipped, not a {pipeline.SPEC_KIND}" for path in self.skipped]
        out += [str(w) for one in self.specs for w in one.warnings]
        out += [
            f"{d} (this spec is left out of --part cluster; its own Application reports it)"
            for d in self.left_out
        ]
        return out

    @property
    def missed(self) -> list[str]:
        """The specs whose failover plan misses its objective, with the verdict."""
        return [text for _, text in self.objectives()]

    def objectives(self) -> list[tuple[str, str]]:
        """Each missed objective with its severity: an error with ``--strict`` or in a spec
        that sets ``failover.strict``, else a warning. The cluster part has none: each
        spec's own Application says its verdict."""
        if self.part == "cluster":
            return []
        return [
            (
                "error" if self.strict or one.plan.failover_strict else "warning",
                f"{one.plan.source}: {one.directory}: {one.plan.failover.verdict()}",
            )
            for one in self.specs
            if one.plan.failover.met is False
        ]

    @property
    def refused(self) -> bool:
        """A missed objective is an error here: nothing is written."""
        return any(severity == "error" for severity, _ in self.objectives())

    @property
    def ok(self) -> bool:
        if self.diagnostics or (self.report is not None and not self.report.ok):
            return False
        return not self.refused

    @property
    def objects(self) -> list[Emitted]:
        return [e for one in self.specs for e in one.objects]


class _Rejected(StandbycError):
    """The gate said no; carries nothing, the report is kept by the caller."""


def kube_versions_of(specs: Sequence[pipeline.CompiledSpec]) -> list[str] | None:
    """The Kubernetes versions the specs ask to be validated against (None: the matrix)."""
    asked = {v for one in specs for v in one.plan.kube_versions}
    return sorted(asked) or None


@dataclass
class _Run:
    """One compile: the build and gate steps (run inside out/'s lock when writing) and
    what they learn as they go."""

    specs_paths: list[Path]
    renderer: Renderer
    root: Path  # what file headers name specs relative to (out/'s parent)
    kube_versions: Sequence[str] | None
    strict_asked: bool
    display_root: str
    apiserver: bool | None = None  # the gate's API server dry-run (None: STANDBYC_APISERVER)
    current: outdir.Contents = field(default_factory=lambda: outdir.Contents({}, []))
    specs: tuple[pipeline.CompiledSpec, ...] = ()
    files: dict[str, str] = field(default_factory=dict)
    report: Report | None = None
    compile_seconds: float = 0.0
    strict: bool = False
    # cluster: the objects every spec shares, for the one Argo CD Application per cluster
    # that owns them; a broken spec is left out (its own Application fails), not fatal.
    part: str = "all"
    left_out: list[Diagnostic] = field(default_factory=list)

    def build(self, current: outdir.Contents) -> dict[str, str]:
        t0 = time.perf_counter()
        self.current = current
        tolerant = self.left_out if self.part == "cluster" else None
        try:
            compiled, self.files = pipeline.build_tree(
                self.specs_paths, self.renderer, current.owned, self.root, tolerant
            )
        finally:
            self.compile_seconds = time.perf_counter() - t0
        self.specs = tuple(compiled)
        self.strict = self.strict_asked
        # Each spec decides for itself: one spec's failover.strict makes its own miss an
        # error, never another spec's.
        if self.part != "cluster" and any(
            (self.strict or c.plan.failover_strict) and c.plan.failover.met is False
            for c in compiled
        ):
            raise _Rejected("a failover objective is missed")
        return self.files

    def gate(self, staged: Path) -> None:
        # The directories of the specs compiled now (and the shared files): files kept
        # from other specs were validated when they were written. The cluster part
        # validates only what it prints, so another spec's finding cannot fail it.
        only = [f"{c.directory}/{decorate.KUSTOMIZATION}" for c in self.specs]
        if self.part == "cluster":
            only = []
        only.append(f"{pipeline.CRD_DIR}/{decorate.KUSTOMIZATION}")
        fresh = self.current.translated
        self.report = run_gate(
            staged,
            kube_versions=self.kube_versions or kube_versions_of(self.specs),
            display_root=self.display_root,
            only=only,
            apiserver=self.apiserver,
            # The tree staged (or found unchanged) holds these texts: read them from here.
            known={r: t for r, t in self.files.items() if r not in fresh},
            # What those texts read back as: each was checked to be its object (serialize).
            parsed={
                path: [e.obj]
                for c in self.specs
                for e in c.objects
                if e.text is None and (path := f"{c.directory}/{e.relpath}") not in fresh
            },
        )
        if not self.report.ok:
            raise _Rejected("validation failed")

    def result(self, out: Path, written: bool, seconds: float, skipped: tuple[str, ...]) -> Result:
        return Result(
            out=out,
            specs=self.specs,
            files=self.files,
            current=self.current.owned,
            changes=Changes.between(self.current.owned, self.files),
            written=written,
            report=self.report,
            compile_seconds=self.compile_seconds,
            write_seconds=seconds - self.compile_seconds,
            strict=self.strict,
            skipped=skipped,
            part=self.part,
            left_out=tuple(self.left_out),
        )


def _renderer(templates: Path | None, kube_versions: Sequence[str] | None) -> Renderer:
    """The renderer for objects meant for ``kube_versions`` (None: the specs' own)."""
    return Renderer(templates, [normalize_version(v) for v in kube_versions or ()])


def _skipped(discovery: pipeline.Discovery) -> tuple[str, ...]:
    return tuple(f"{path} (kind: {kind})" for path, kind in discovery.skipped)


def compile_tree(
    paths: Sequence[Path] = (),
    out: Path = Path("out"),
    *,
    validate: bool = True,
    templates: Path | None = None,
    kube_versions: Sequence[str] | None = None,
    write: bool = True,
    strict: bool = False,
    apiserver: bool | None = None,
) -> Result:
    """Compile the specs in ``paths`` (default ``specs/``) into ``out``.

    The lock on ``out`` is taken before ``out`` is read, so two compiles never both
    succeed while one's output is lost. With ``strict`` (or a spec's ``failover.strict``)
    a missed failover objective writes nothing.
    """
    roots = list(paths) or [DEFAULT_SPECS]
    out = outdir.check_target(out, roots)
    discovery = pipeline.discover_specs(roots)
    renderer = _renderer(templates, kube_versions)
    run = _Run(
        discovery.specs, renderer, out.resolve().parent, kube_versions, strict,
        out.as_posix(), apiserver,
    )  # fmt: skip
    t0 = time.perf_counter()
    written = False
    try:
        if write:
            written = outdir.replace(out, run.build, validate=run.gate if validate else None)
        else:
            run.build(outdir.read_settled(out))
    except SpecError as exc:
        return Result(out, diagnostics=exc.diagnostics, skipped=_skipped(discovery))
    except _Rejected:
        pass
    return run.result(out, written, time.perf_counter() - t0, _skipped(discovery))


STREAM_ROOT = Path("<stdout>")


def compile_objects(
    paths: Sequence[Path] = (),
    *,
    validate: bool = True,
    templates: Path | None = None,
    kube_versions: Sequence[str] | None = None,
    strict: bool = False,
    part: str = "all",
    apiserver: bool | None = None,
) -> Result:
    """Compile the specs in ``paths`` on their own, with no ``out/``: nothing on disk is
    read or kept, and the result's objects are what ``stream`` prints (``part`` of them).
    The gate needs files, so when validating the tree is written to a scratch directory
    for it alone."""
    roots = list(paths) or [DEFAULT_SPECS]
    discovery = pipeline.discover_specs(roots)
    renderer = _renderer(templates, kube_versions)
    run = _Run(
        discovery.specs, renderer, Path.cwd(), kube_versions, strict,
        STREAM_ROOT.as_posix(), apiserver, part=part,
    )  # fmt: skip
    t0 = time.perf_counter()
    try:
        files = run.build(outdir.Contents({}, []))
        if validate:
            with tempfile.TemporaryDirectory(prefix="standbyc-gate-") as scratch:
                outdir.write_files(Path(scratch), files)
                run.gate(Path(scratch))
    except SpecError as exc:
        return Result(STREAM_ROOT, diagnostics=exc.diagnostics, skipped=_skipped(discovery))
    except _Rejected:
        pass
    return run.result(STREAM_ROOT, False, time.perf_counter() - t0, _skipped(discovery))


PARTS = ("all", "spec", "cluster")


def stream(result: Result, part: str = "all") -> str:
    """The objects a ``compile_objects`` result applies, as one YAML stream in apply
    order: the CRDs and each spec's resources (what the root kustomization.yaml
    reaches), never tests, plan documents or kustomize files. Argo CD's config
    management plugin prints it. ``part`` ``spec`` leaves out the kinds all specs share
    (a CRD), ``cluster`` keeps only those. Built from the objects, in the texts already
    serialized for them: nothing is read back."""
    used = {e.kind for one in result.specs for e in one.objects}
    applied = [(f"{pipeline.CRD_DIR}/{e.relpath}", e) for e in pipeline.crd_objects(used)]
    applied += [(f"{one.directory}/{e.relpath}", e) for one in result.specs for e in one.objects]
    docs: list[tuple[tuple[int, str, str], str]] = []
    for path, e in applied:
        if not e.is_resource:
            continue
        shared = kinds.get(e.kind).shared
        if (part == "spec" and shared) or (part == "cluster" and not shared):
            continue
        meta = e.obj.get("metadata", {})
        key = (kinds.rank(e.kind), meta.get("namespace", ""), meta.get("name", ""))
        docs.append((key, result.files[path].split("\n", 1)[1]))  # without the header
    return "".join(f"---\n{text}" for _, text in sorted(docs))
