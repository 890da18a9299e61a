"""Where the offline schemas come from: Kubernetes' from the PyPI package
``kubernetes-validate``, each kind's file made standalone (its ``$ref``s are absolute,
``/api/_definitions.json#...``, which kubeconform cannot resolve from disk), and the CRDs'
converted from CRD YAML in pinned Go module zips (``go mod download``; with
``GOPROXY=off`` unless ``allow_network``) and from standbyc's own CRD. Each build goes to a
temp directory swapped in whole. ``compiler.gate.schemas`` lays them out and keeps them.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from importlib import resources
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML

from compiler import tools
from compiler.errors import EXIT_BAD_INPUT, StandbycError, ToolMissing
from compiler.gate import crd as crdconv
from compiler.gate import pins as pinfile


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


def normalize_version(version: str) -> str:
    """``v1.31``, ``1.31.0`` and ``1.31`` all mean ``1.31`` (schemas exist per minor)."""
    parts = version.strip().removeprefix("v").split(".")
    if len(parts) < 2 or not all(p.isdigit() for p in parts[:2]):
        raise StandbycError(f"not a Kubernetes version: {version!r} (expected like 1.31)")
    return f"{int(parts[0])}.{int(parts[1])}"


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
    with building(dest) as tmp:
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
    with building(dest) as tmp:
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


@contextlib.contextmanager
def building(dest: Path) -> Iterator[Path]:
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
