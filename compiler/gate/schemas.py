"""The offline schema directory that kubeconform reads with ``-schema-location``.

Layout (one directory, rebuilt by ``standbyc schemas build``)::

    <dir>/manifest.json                       what was built, from which pins
    <dir>/kubernetes/v1.31.0/<kind>-<group>-<version>.json   + _definitions.json
    <dir>/crds/<kind>-<group-first-label>-<version>.json

Kubernetes schemas come from the installed PyPI package ``kubernetes-validate``; their
``$ref``s are absolute (``/api/_definitions.json#...``), which kubeconform cannot resolve
from disk, so they are rewritten to the sibling file. CRD schemas are converted from CRD
YAML in pinned Go module zips (``go mod download``) and from standbyc's own CRD.

Nothing here touches the network unless ``allow_network`` is set (``schemas build``); an
implicit build from ``validate`` runs Go with ``GOPROXY=off`` so it only reads the module
cache.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from compiler import tools
from compiler.errors import EXIT_BAD_INPUT, StandbycError, ToolFailed, ToolMissing
from compiler.fsutil import user_dir
from compiler.gate import crd as crdconv
from compiler.gate import pins as pinfile

MANIFEST = "manifest.json"
# Bump when the conversion code changes what it writes, so old caches count as stale.
FORMAT = 1


def build_hint() -> str:
    """How to get schemas, for where this runs: the Argo CD plugin's sidecar (it cannot
    build), a checkout (make), or an installed wheel."""
    if os.environ.get("ARGOCD_APP_NAME"):
        prebuilt = ", ".join(pinfile.load().kube_prebuilt)
        return (
            "set the plugin parameter KUBE_VERSIONS (PARAM_KUBE_VERSIONS or "
            f"ARGOCD_ENV_KUBE_VERSIONS) to versions the image carries: {prebuilt}"
        )
    repo = Path(__file__).resolve().parents[2]
    if (repo / "Makefile").is_file() and (repo / "compiler").is_dir():
        return "make schemas"
    return "standbyc schemas build"


class SchemasMissing(StandbycError):
    """The offline schema directory is absent, stale or lacks a requested version."""

    exit_code = EXIT_BAD_INPUT


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


def normalize_version(version: str) -> str:
    """``v1.31``, ``1.31.0`` and ``1.31`` all mean ``1.31`` (schemas exist per minor)."""
    parts = version.strip().removeprefix("v").split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise StandbycError(f"not a Kubernetes version: {version!r} (expected like 1.31)")
    return f"{int(parts[0])}.{int(parts[1])}"


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


# --- Kubernetes core -------------------------------------------------------------------


def kubernetes_validate_root() -> tuple[Path, str]:
    try:
        import kubernetes_validate  # noqa: PLC0415 - optional at import time of standbyc
        from kubernetes_validate.version import __version__ as kv_version  # noqa: PLC0415
    except ImportError as exc:
        raise SchemasMissing(
            "the PyPI package kubernetes-validate is not installed; pip install standbyc's "
            "dependencies, then run " + build_hint()
        ) from exc
    root = Path(kubernetes_validate.__file__).parent / "kubernetes-json-schema"
    return root, str(kv_version)


_REF = re.compile(r'"\$ref":"(?:/api/_definitions\.json)?#/\$defs/([^"]+)"')


def build_kubernetes(dest: Path, version: str) -> int:
    """Write standalone strict schemas of one Kubernetes minor into ``dest``; return the count.

    kubernetes-validate's files refer to ``/api/_definitions.json`` (1 MB), an absolute
    path kubeconform cannot resolve from disk. Rewriting the refs to the sibling file works,
    but then kubeconform parses and compiles the whole definitions file once per kind and
    version: 0.6 s per version on the fixtures. So each kind's file gets its own ``$defs``
    holding only the definitions it reaches (0.2 s per version). Only files of real
    resource kinds are written; kubeconform never looks up the others.
    """
    src_root, _ = kubernetes_validate_root()
    minor = normalize_version(version)
    src = src_root / f"v{minor}.0-local-strict"
    if not src.is_dir():
        have = sorted(p.name.split("-")[0] for p in src_root.glob("v*-local-strict"))
        raise SchemasMissing(f"kubernetes-validate has no schemas for {minor}; it has {have}")
    definitions: dict[str, Any] = json.loads((src / "_definitions.json").read_text())["$defs"]
    deps = {
        name: set(_REF.findall(json.dumps(body, separators=(",", ":"))))
        for name, body in definitions.items()
    }
    with _building(dest) as tmp:
        return _write_kubernetes(tmp, src, definitions, deps)


def _write_kubernetes(
    tmp: Path, src: Path, definitions: dict[str, Any], deps: dict[str, set[str]]
) -> int:
    count = 0
    for path in sorted(src.glob("*.json")):
        if path.name == "_definitions.json":
            continue
        data: dict[str, Any] = json.loads(path.read_text())
        if "x-kubernetes-group-version-kind" not in data:
            continue  # a sub-type such as Affinity, never a document's kind
        # An absolute $id would make kubeconform resolve refs against kubernetes.io.
        data.pop("$id", None)
        text = json.dumps(data, separators=(",", ":"))
        todo, reached = set(_REF.findall(text)), set()
        while todo:
            name = todo.pop()
            if name not in reached:
                reached.add(name)
                todo |= deps[name] - reached
        text = text.replace('"/api/_definitions.json#/', '"#/')
        standalone = json.loads(text)
        if reached:
            standalone["$defs"] = {
                name: json.loads(
                    json.dumps(definitions[name]).replace('"/api/_definitions.json#/', '"#/')
                )
                for name in sorted(reached)
            }
        (tmp / path.name).write_text(json.dumps(standalone, separators=(",", ":")))
        count += 1
    return count


# --- CRDs --------------------------------------------------------------------------------


def _go_env(allow_network: bool) -> dict[str, str]:
    env = dict(os.environ)
    env["GOFLAGS"] = "-mod=mod"
    if not allow_network:
        env["GOPROXY"] = "off"  # read the module cache only
    return env


def module_dir(module: str, version: str, *, allow_network: bool) -> Path:
    """The extracted directory of ``module@version``, via ``go mod download -json``."""
    with tempfile.TemporaryDirectory() as cwd:  # outside any go.mod
        try:
            result = tools.run(
                "go",
                ["mod", "download", "-json", f"{module}@{version}"],
                ok_codes=(0, 1),
                cwd=Path(cwd),
                env=_go_env(allow_network),
            )
        except ToolMissing:
            raise SchemasMissing(
                f"cannot read {module}@{version}: the go command is missing; it fetches the "
                "pinned CRD sources from the Go module proxy. Install Go >= 1.24 "
                "(https://go.dev/dl, or apt-get install golang-go) and run it again, or point "
                "STANDBYC_SCHEMA_DIR at a schema directory built elsewhere"
            ) from None
    info: dict[str, Any] = json.loads(result.stdout or "{}")
    if result.returncode != 0 or "Dir" not in info:
        raise SchemasMissing(
            f"cannot download {module}@{version}: {info.get('Error', result.stderr.strip())}\n"
            f"run {build_hint()} with access to the Go module proxy"
        )
    return Path(info["Dir"])


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _load_yaml_docs(text: str) -> list[Any]:
    return list(YAML(typ="safe").load_all(text))


def crd_source_text(source: pinfile.CrdSource, *, allow_network: bool) -> str:
    if source.package_data:
        return resources.files("compiler").joinpath("data", source.package_data).read_text()
    assert source.module and source.version and source.file  # pins.json is checked in tests
    path = module_dir(source.module, source.version, allow_network=allow_network) / source.file
    actual = _sha256(path)
    if actual != source.sha256:
        raise SchemasMissing(
            f"{source.label}: sha256 {actual} does not match the pin {source.sha256}"
        )
    return path.read_text()


def build_crds(
    dest: Path, sources: Iterable[pinfile.CrdSource], *, allow_network: bool
) -> list[str]:
    with _building(dest) as tmp:
        return _write_crds(tmp, sources, allow_network=allow_network)


def _write_crds(
    tmp: Path, sources: Iterable[pinfile.CrdSource], *, allow_network: bool
) -> list[str]:
    written: list[str] = []
    for source in sources:
        wanted = set(source.kinds)
        found: set[str] = set()
        for doc in crdconv.iter_crds(
            _load_yaml_docs(crd_source_text(source, allow_network=allow_network))
        ):
            if doc["spec"]["names"]["kind"] not in wanted:
                continue
            found.add(doc["spec"]["names"]["kind"])
            for item in crdconv.crd_schemas(doc):
                (tmp / item.filename).write_text(json.dumps(item.schema, indent=1, sort_keys=True))
                written.append(item.filename)
        if missing := wanted - found:
            raise SchemasMissing(f"{source.label} defines no CRD for {sorted(missing)}")
    return sorted(written)


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


@contextlib.contextmanager
def _building(dest: Path) -> Iterator[Path]:
    """A temp directory next to ``dest``, swapped in when the build succeeds and removed
    when it fails (a failed build leaves nothing in the cache)."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    tmp.chmod(0o755)  # mkdtemp's 0700 would be swapped in as the finished folder's mode
    try:
        yield tmp
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _replace_dir(tmp, dest)


def _replace_dir(tmp: Path, dest: Path) -> None:
    """Swap a finished build into place so a crash never leaves half a directory."""
    if dest.exists():
        trash = dest.with_name(f".{dest.name}.old")
        shutil.rmtree(trash, ignore_errors=True)
        dest.rename(trash)
        tmp.rename(dest)
        shutil.rmtree(trash, ignore_errors=True)
    else:
        tmp.rename(dest)
