"""The compile pipeline: load -> validate -> plan -> render -> order -> tree.

Each step is a small function; ``build_tree`` strings them together and
returns the complete set of files standbyc owns under ``out/``. Writing that
tree (atomically) and validating it are the caller's next steps.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from compiler import yamlio
from compiler.errors import Diagnostic, Location, SpecError, UsageError
from compiler.load import display_path, load_file
from compiler.plan import Plan, build
from compiler.render import render_all
from compiler.render.base import Emitted, Renderer
from compiler.validate_spec import validate

# kubectl-like apply order: things others depend on first.
KIND_ORDER = (
    "CustomResourceDefinition",
    "ServiceAccount",
    "ClusterPolicy",
    "ConfigMap",
    "NetworkPolicy",
    "CiliumEgressQoS",
    "DestinationRule",
    "PrometheusRule",
    "CronJob",
    "Job",
)
SHARED_SOURCE = "standbyc (shared by all specs)"
CRD_DIR = "crds"
KUSTOMIZATION = "kustomization.yaml"
SPEC_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True)
class CompiledSpec:
    plan: Plan
    directory: str  # <namespace>/<name>
    files: dict[str, str]  # path below out/ -> text
    objects: list[Emitted]
    name_location: Location


def discover(paths: Sequence[Path]) -> list[Path]:
    """Spec files named on the command line, or found (recursively) in named directories."""
    found: list[Path] = []
    for path in paths:
        if path.is_dir():
            found.extend(
                sorted(p for p in path.rglob("*") if p.suffix in SPEC_SUFFIXES and p.is_file())
            )
        elif path.is_file():
            found.append(path)
        else:
            raise UsageError(f"{path}: no such file or directory")
    if not found:
        raise UsageError(f"no spec files (*.yaml) found in {', '.join(map(str, paths))}")
    unique: dict[Path, Path] = {}
    for p in found:
        unique.setdefault(p.resolve(), p)
    return list(unique.values())


def order(items: Iterable[Emitted]) -> list[Emitted]:
    def key(e: Emitted) -> tuple[int, str, str]:
        rank = KIND_ORDER.index(e.kind) if e.kind in KIND_ORDER else len(KIND_ORDER)
        return (rank, e.name, e.relpath)

    return sorted(items, key=key)


def kustomization(resource_paths: Sequence[str]) -> dict[str, Any]:
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": list(resource_paths),
    }


def compile_spec(path: Path, renderer: Renderer) -> CompiledSpec:
    loaded = load_file(path)
    spec = validate(loaded)
    plan = build(spec, loaded.source)
    emitted = order(render_all(plan, renderer))
    directory = f"{plan.namespace}/{plan.name}"
    files = {f"{directory}/{e.relpath}": yamlio.document(e.obj, plan.source) for e in emitted}
    listed = [e.relpath for e in emitted if e.is_resource]
    files[f"{directory}/{KUSTOMIZATION}"] = yamlio.document(kustomization(listed), plan.source)
    name_location = loaded.positions.locate(loaded.source, ("metadata", "name"))
    return CompiledSpec(plan, directory, files, emitted, name_location)


def compile_specs(paths: Sequence[Path], renderer: Renderer) -> list[CompiledSpec]:
    """Compile every spec; report the problems of all of them at once."""
    compiled: list[CompiledSpec] = []
    problems: list[Diagnostic] = []
    seen: dict[str, str] = {}
    for path in paths:
        try:
            one = compile_spec(path, renderer)
        except SpecError as exc:
            problems.extend(exc.diagnostics)
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


def crd_documents() -> dict[str, str]:
    """standbyc's own CRDs, in the shared ``crds/`` directory, synced first."""
    out: dict[str, str] = {}
    listed: list[str] = []
    folder = resources.files("compiler") / "data" / "crds"
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if not entry.name.endswith(".yaml"):
            continue
        obj = yamlio.parse_one(entry.read_text(encoding="utf-8"))[0]
        annotations = obj["metadata"].setdefault("annotations", {})
        annotations["argocd.argoproj.io/sync-wave"] = "-2"
        name = f"customresourcedefinition-{obj['metadata']['name']}.yaml"
        out[f"{CRD_DIR}/{name}"] = yamlio.document(obj, SHARED_SOURCE)
        listed.append(name)
    out[f"{CRD_DIR}/{KUSTOMIZATION}"] = yamlio.document(kustomization(listed), SHARED_SOURCE)
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
    uses_crd = any("/ciliumegressqos-" in p for p in files)
    if uses_crd:
        files.update(crd_documents())
    root = ([CRD_DIR] if uses_crd else []) + spec_dirs
    files[KUSTOMIZATION] = yamlio.document(kustomization(root), SHARED_SOURCE)
    return dict(sorted(files.items()))


def spec_source_exists(source: str) -> bool:
    return Path(source).is_file()


def build_tree(
    spec_paths: Sequence[Path], renderer: Renderer, owned: dict[str, str]
) -> tuple[list[CompiledSpec], dict[str, str]]:
    """Compile ``spec_paths`` and merge with the owned files of specs not compiled now.

    An owned file survives only if the spec named in its header still exists
    and was not part of this compile; shared files are always rebuilt.
    """
    compiled = compile_specs(spec_paths, renderer)
    sources = {c.plan.source for c in compiled} | {display_path(p) for p in spec_paths}
    kept: dict[str, str] = {}
    for rel, text in owned.items():
        src = yamlio.source_of(text)
        if src is None or src == SHARED_SOURCE or src in sources:
            continue
        if spec_source_exists(src):
            kept[rel] = text
    return compiled, assemble(compiled, kept)
