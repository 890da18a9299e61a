"""The offline schema directory that kubeconform reads with ``-schema-location``.

Layout (one directory, rebuilt by ``standbyc schemas build``)::

    <dir>/manifest.json                       what was built, from which pins
    <dir>/kubernetes/v1.31.0/<kind>-<group>-<version>.json   + _definitions.json
    <dir>/crds/<kind>-<group-first-label>-<version>.json

Kubernetes schemas come from the installed PyPI package ``kubernetes-validate``; their
``$ref``s are absolute (``/api/_definitions.json#...``), which kubeconform cannot resolve
from disk, so they are rewritten to the sibling file. CRD schemas are converted from CRD
YAML in pinned Go module zips (``go mod download``) and from standbyc's own CRD. How each
is built: ``compiler.gate.schema_sources``.

Nothing here touches the network unless ``allow_network`` is set (``schemas build``); an
implicit build from ``validate`` runs Go with ``GOPROXY=off`` so it only reads the module
cache.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler.errors import ToolFailed
from compiler.fsutil import user_dir
from compiler.gate import pins as pinfile
from compiler.gate.schema_sources import (
    SchemasMissing,
    build_crds,
    build_hint,
    build_kubernetes,
    crd_source_text,
    kubernetes_validate_root,
    module_dir,
    normalize_version,
)

__all__ = [  # with what ``compiler.gate.schema_sources`` builds, as callers name it here
    "FORMAT",
    "MANIFEST",
    "SchemaDir",
    "SchemasMissing",
    "build",
    "build_crds",
    "build_hint",
    "crd_source_text",
    "default_kube_versions",
    "default_schema_dir",
    "ensure",
    "is_fresh",
    "kubernetes_validate_root",
    "module_dir",
    "normalize_version",
    "overlay_dir",
    "readable",
    "readable_by_all",
]

MANIFEST = "manifest.json"
# Bump when the conversion code changes what it writes, so old caches count as stale.
FORMAT = 1


@dataclass(frozen=True)
class SchemaDir:
    root: Path
    # Kubernetes versions built when asked, where ``root`` cannot be written (the plugin
    # image's read-only directory): a second place kubeconform looks.
    overlay: Path | None = None

    @property
    def kubernetes(self) -> Path:
        return self.root / "kubernetes"

    @property
    def crds(self) -> Path:
        return self.root / "crds"

    def kube_dir(self, version: str) -> Path:
        own = self.kubernetes / f"v{normalize_version(version)}.0"
        if self.overlay is not None and not own.is_dir():
            return self.overlay / "kubernetes" / own.name
        return own

    def locations(self) -> list[str]:
        """kubeconform ``-schema-location`` templates, Kubernetes first, then CRDs."""
        kube = "{{.NormalizedKubernetesVersion}}/{{.ResourceKind}}{{.KindSuffix}}.json"
        out = [f"{self.kubernetes}/{kube}"]
        if self.overlay is not None:
            out.append(f"{self.overlay / 'kubernetes'}/{kube}")
        return [*out, f"{self.crds}/{{{{.ResourceKind}}}}{{{{.KindSuffix}}}}.json"]

    def identity(self) -> str:
        """The schema set as a cache key part: where it is and the pins and format its build
        recorded. Not which Kubernetes versions it holds: a version built later (by another
        run, into the same directory) leaves the others' schemas as they were, and the
        caller digests the folders it reads."""
        parts = []
        for root in (self.root, self.overlay):
            if root is None:
                continue
            try:
                recorded = json.loads((root / MANIFEST).read_bytes())
                built = {k: v for k, v in recorded.items() if k != "kubernetes"}
                stamp = hashlib.sha256(json.dumps(built, sort_keys=True).encode()).hexdigest()
            except (OSError, ValueError, AttributeError):
                stamp = "-"
            parts.append(f"{root.resolve()}:{stamp}")
        return "+".join(parts)

    def manifest(self) -> dict[str, Any] | None:
        try:
            data: dict[str, Any] = json.loads((self.root / MANIFEST).read_text())
        except (OSError, ValueError):
            return None
        return data


def default_kube_versions() -> tuple[str, ...]:
    return pinfile.load().kube_default_matrix


def default_schema_dir() -> Path:
    """``$STANDBYC_SCHEMA_DIR``, else ``<repo>/.cache/schemas`` in a checkout, else user cache."""
    env = os.environ.get("STANDBYC_SCHEMA_DIR")
    if env:
        return Path(env)
    repo = Path(__file__).resolve().parents[2]
    if (repo / "pyproject.toml").is_file() and (repo / "compiler").is_dir():
        return repo / ".cache" / "schemas"
    return user_dir("schemas")


# --- the whole directory -----------------------------------------------------------------


def build(
    root: Path,
    kube_versions: Sequence[str] | None = None,
    *,
    allow_network: bool = True,
    keep_existing: bool = False,
) -> dict[str, Any]:
    """(Re)build the schema directory; return the manifest that was written."""
    pins = pinfile.load()
    versions = [normalize_version(v) for v in (kube_versions or pins.kube_prebuilt)]
    sd = SchemaDir(root)
    sd.kubernetes.mkdir(parents=True, exist_ok=True)
    old = sd.manifest() if keep_existing else None
    old_kube: dict[str, Any] = dict(old.get("kubernetes", {})) if old else {}
    kube: dict[str, Any] = {}
    for version in versions:
        if version in old_kube and sd.kube_dir(version).is_dir():
            kube[version] = old_kube[version]
            continue
        kube[version] = {"files": build_kubernetes(sd.kube_dir(version), version)}
    for version, entry in old_kube.items():  # keep versions built earlier
        if version not in kube and sd.kube_dir(version).is_dir():
            kube[version] = entry
    if old and old.get("crds") and sd.crds.is_dir():
        crd_files = old["crds"]
    else:
        crd_files = build_crds(sd.crds, pins.crds, allow_network=allow_network)
    _, kv_version = kubernetes_validate_root()
    manifest = {
        "format": FORMAT,
        "pins_sha256": pins.digest,
        "kubernetes_validate": kv_version,
        "kubernetes": dict(sorted(kube.items(), key=lambda kv: tuple(map(int, kv[0].split("."))))),
        "crds": crd_files,
        "crd_sources": [s.label for s in pins.crds],
    }
    (root / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    readable_by_all(root)
    return manifest


def readable_by_all(root: Path) -> None:
    """Folders 0755, files 0644 under ``root``, whatever the umask: the tree is copied as it
    is into images whose user is not its owner (the Argo CD plugin's runs as uid 999)."""
    root.chmod(0o755)
    for dirpath, dirnames, filenames in os.walk(root):  # links are not followed, nor changed
        for names, mode in ((dirnames, 0o755), (filenames, 0o644)):
            for path in (Path(dirpath) / name for name in names):
                if not path.is_symlink():
                    path.chmod(mode)


def _built_versions(sd: SchemaDir) -> dict[str, Any]:
    """The Kubernetes versions in ``sd`` if it was built from the current pins and code."""
    manifest = sd.manifest()
    pins = pinfile.load()
    if not manifest or manifest.get("pins_sha256") != pins.digest:
        return {}
    if manifest.get("format") != FORMAT or not sd.crds.is_dir():
        return {}
    built: dict[str, Any] = manifest.get("kubernetes", {})
    return {v: e for v, e in built.items() if sd.kube_dir(v).is_dir()}


def is_fresh(root: Path, kube_versions: Sequence[str]) -> bool:
    built = _built_versions(SchemaDir(root))
    return all(normalize_version(v) in built for v in kube_versions)


def ensure(root: Path, kube_versions: Sequence[str]) -> SchemaDir:
    """Return a schema dir holding ``kube_versions``; build what is missing offline, or fail.

    An offline build is possible when kubernetes-validate is installed and the pinned CRD
    modules are in the Go module cache (``make tools`` puts them there). Where ``root``
    cannot be written (the plugin image's directory) but holds fresh schemas, a missing
    Kubernetes version is built from kubernetes-validate into a writable cache beside it.
    Otherwise the error says what works where it runs.
    """
    sd = SchemaDir(root)
    manifest = sd.manifest()
    built = _built_versions(sd)
    fresh = bool(built)
    wanted = [normalize_version(v) for v in kube_versions]
    missing = [v for v in wanted if v not in built]
    if not missing:
        return readable(sd, wanted)
    shipped = pinfile.load().kube_available
    if unknown := [v for v in missing if v not in shipped]:
        raise SchemasMissing(
            f"no schemas for Kubernetes {', '.join(unknown)}: kubernetes-validate "
            f"{pinfile.load().kubernetes_validate_version} (pinned) ships {shipped[0]} to "
            f"{shipped[-1]}; validate against one of those (a newer standbyc pins a newer "
            f"package), or {build_hint()}"
        )
    if fresh and not os.access(root, os.W_OK):
        return readable(_overlay(sd, missing), wanted)
    try:
        build(root, wanted, allow_network=False, keep_existing=fresh)
    except PermissionError:
        if fresh:
            return readable(_overlay(sd, missing), wanted)
        raise SchemasMissing(
            f"the offline schema directory {root} cannot be written and holds no schemas "
            f"built from these pins; {build_hint()}"
        ) from None
    except (SchemasMissing, ToolFailed) as exc:
        state = "is stale (built from other pins)" if manifest and not fresh else "is missing"
        raise SchemasMissing(
            f"the offline schema directory {root} {state} or lacks Kubernetes "
            f"{', '.join(missing)}, and cannot be built offline:\n  {exc}\n"
            f"run: {build_hint()}"
        ) from exc
    return sd


def readable(sd: SchemaDir, versions: Sequence[str]) -> SchemaDir:
    """``sd``, once every folder and file kubeconform would read at ``versions`` is open to
    this user; else PermissionError (exit 2, naming it): kubeconform itself would report
    every manifest invalid, as if the manifests were at fault."""
    for place in [sd.crds, *(sd.kube_dir(v) for v in versions)]:
        paths = [place]
        if os.access(place, os.R_OK | os.X_OK):
            paths += [Path(entry.path) for entry in os.scandir(place)]
        for path in paths:
            mode = os.R_OK | (os.X_OK if path == place else 0)
            if not os.access(path, mode):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(path))
    return sd


def overlay_dir() -> Path:
    """Where Kubernetes versions are built when the schema directory is read-only: the
    user cache if it can be written, else the temp directory."""
    for base in (user_dir("schemas-extra"), Path(tempfile.gettempdir()) / "standbyc"):
        try:
            base.mkdir(parents=True, exist_ok=True)
        except OSError:
            continue
        if os.access(base, os.W_OK):
            return base
    raise SchemasMissing(f"no writable directory to build schemas in; {build_hint()}")


def _overlay(sd: SchemaDir, versions: Sequence[str]) -> SchemaDir:
    """``sd`` plus the Kubernetes ``versions`` it lacks, built into a writable overlay."""
    extra = overlay_dir() / hashlib.sha256(str(sd.root.resolve()).encode()).hexdigest()[:16]
    manifest_path = extra / MANIFEST
    try:
        recorded: dict[str, Any] = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        recorded = {}
    if recorded.get("pins_sha256") != pinfile.load().digest:
        recorded = {"pins_sha256": pinfile.load().digest, "format": FORMAT, "kubernetes": {}}
    out = SchemaDir(sd.root, extra)
    for version in versions:
        if version in recorded["kubernetes"] and out.kube_dir(version).is_dir():
            continue
        recorded["kubernetes"][version] = {
            "files": build_kubernetes(extra / "kubernetes" / f"v{version}.0", version)
        }
    manifest_path.write_text(json.dumps(recorded, indent=2, sort_keys=True) + "\n")
    readable_by_all(extra)
    return out
