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

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from compiler import kinds, outdir, pipeline, yamlio
from compiler.errors import Diagnostic, SpecError, StandbycError
from compiler.gate import Report, run_gate
from compiler.render.base import Emitted, Renderer

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
    strict: bool = False  # a missed failover objective is a failure (nothing written)
    skipped: tuple[str, ...] = ()  # files in spec directories that are not specs

    @property
    def warnings(self) -> list[str]:
        """Things the user should know that did not stop the compile."""
        out = [f"{path}: skipped, not a {pipeline.SPEC_KIND}" for path in self.skipped]
        out += [str(w) for one in self.specs for w in one.warnings]
        return out

    @property
    def missed(self) -> list[str]:
        """The specs whose failover plan misses its objective, with the verdict."""
        return [
            f"{one.plan.source}: {one.directory}: {one.plan.failover.verdict()}"
            for one in self.specs
            if one.plan.failover.met is False
        ]

    @property
    def ok(self) -> bool:
        if self.diagnostics or (self.report is not None and not self.report.ok):
            return False
        return not (self.strict and self.missed)

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
    """What one compile learns as it goes (the build and gate steps run inside the lock)."""

    current: outdir.Contents = field(default_factory=lambda: outdir.Contents({}, []))
    specs: tuple[pipeline.CompiledSpec, ...] = ()
    files: dict[str, str] = field(default_factory=dict)
    report: Report | None = None
    compile_seconds: float = 0.0
    strict: bool = False


def compile_tree(
    paths: Sequence[Path] = (),
    out: Path = Path("out"),
    *,
    validate: bool = True,
    templates: Path | None = None,
    kube_versions: Sequence[str] | None = None,
    write: bool = True,
    strict: bool = False,
) -> Result:
    """Compile the specs in ``paths`` (default ``specs/``) into ``out``.

    The lock on ``out`` is taken before ``out`` is read, so two compiles never both
    succeed while one's output is lost. With ``strict`` (or a spec's ``failover.strict``)
    a missed failover objective writes nothing.
    """
    roots = list(paths) or [DEFAULT_SPECS]
    out = outdir.check_target(out, roots)
    discovery = pipeline.discover_specs(roots)
    specs = discovery.specs
    skipped = tuple(f"{path} (kind: {kind})" for path, kind in discovery.skipped)
    renderer = Renderer(templates)
    run = _Run()

    def build(current: outdir.Contents) -> dict[str, str]:
        t0 = time.perf_counter()
        run.current = current
        try:
            compiled, run.files = pipeline.build_tree(
                specs, renderer, current.owned, out.resolve().parent
            )
        finally:
            run.compile_seconds = time.perf_counter() - t0
        run.specs = tuple(compiled)
        run.strict = strict or any(c.plan.failover_strict for c in compiled)
        if run.strict and any(c.plan.failover.met is False for c in compiled):
            raise _Rejected("a failover objective is missed")
        return run.files

    def gate(staged: Path) -> None:
        # The directories of the specs compiled now (and the shared files): files kept
        # from other specs were validated when they were written.
        only = [f"{c.directory}/{pipeline.KUSTOMIZATION}" for c in run.specs]
        only.append(f"{pipeline.CRD_DIR}/{pipeline.KUSTOMIZATION}")
        run.report = run_gate(
            staged,
            kube_versions=kube_versions or kube_versions_of(run.specs),
            display_root=out.as_posix(),
            only=only,
            # The tree staged (or found unchanged) holds these texts: read them from here.
            known={r: t for r, t in run.files.items() if r not in run.current.translated},
            # What those texts read back as: each was checked to be its object (serialize).
            parsed={
                path: [e.obj]
                for c in run.specs
                for e in c.objects
                if e.text is None
                and (path := f"{c.directory}/{e.relpath}") not in run.current.translated
            },
        )
        if not run.report.ok:
            raise _Rejected("validation failed")

    t0 = time.perf_counter()
    written = False
    try:
        if write:
            written = outdir.replace(out, build, validate=gate if validate else None)
        else:
            build(outdir.read_settled(out))
    except SpecError as exc:
        return Result(out, diagnostics=exc.diagnostics, skipped=skipped)
    except _Rejected:
        pass
    return Result(
        out=out,
        specs=run.specs,
        files=run.files,
        current=run.current.owned,
        changes=Changes.between(run.current.owned, run.files),
        written=written,
        report=run.report,
        compile_seconds=run.compile_seconds,
        write_seconds=time.perf_counter() - t0 - run.compile_seconds,
        strict=run.strict,
        skipped=skipped,
    )


PARTS = ("all", "spec", "cluster")


def stream(files: dict[str, str], part: str = "all") -> str:
    """The objects a tree applies, as one YAML stream in apply order: what the
    root kustomization.yaml reaches (CRDs and each spec's resources), never tests, plan
    documents or kustomize files. Argo CD's config management plugin prints it. ``part``
    ``spec`` leaves out the kinds all specs share (a CRD), ``cluster`` keeps only those."""
    docs: list[tuple[tuple[int, str, str], str]] = []

    def visit(directory: str) -> None:
        path = f"{directory}/{pipeline.KUSTOMIZATION}" if directory else pipeline.KUSTOMIZATION
        listed = yamlio.parse_one(files[path])[0].get("resources", [])
        for entry in listed:
            rel = f"{directory}/{entry}" if directory else entry
            if rel in files:
                text = files[rel].split("\n", 1)[1]  # without the generated-file comment
                obj = yamlio.parse_one(text)[0]
                shared = kinds.get(obj["kind"]).shared
                if (part == "spec" and shared) or (part == "cluster" and not shared):
                    continue
                meta = obj.get("metadata", {})
                key = (kinds.rank(obj["kind"]), meta.get("namespace", ""), meta.get("name", ""))
                docs.append((key, text))
            else:
                visit(rel)

    if pipeline.KUSTOMIZATION in files:
        visit("")
    return "".join(f"---\n{text}" for _, text in sorted(docs))
