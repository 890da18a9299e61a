"""The one pin file (``compiler/data/pins.json``): tool versions, schema sources, checksums."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from importlib import resources
from typing import Any

from compiler import kinds


@dataclass(frozen=True)
class ToolPin:
    name: str
    module: str
    package: str
    version: str
    sum: str
    ldflags: str = ""  # with {version} and {release}: what the release build sets
    release: str | None = None
    fallback_apt: str | None = None
    optional: bool = False  # a long build: `standbyc tools install --optional`
    # Built through a wrapper module (compiler/gate/wrapper.py): the version each staging
    # module of the pinned go.mod is replaced with, and/or the call a generated main makes.
    staging: str | None = None
    main: str | None = None

    @property
    def stamp(self) -> str:
        return f"{self.module}@{self.version}"

    @property
    def wrapped(self) -> bool:
        return self.staging is not None or self.main is not None

    @property
    def path(self) -> str:
        """What ``go install`` takes: ``./cmd/x`` -> ``MODULE/cmd/x``; ``.`` -> ``MODULE``."""
        return self.module + self.package.removeprefix(".")

    def go_ldflags(self) -> str:
        return self.ldflags.format(version=self.version, release=self.release or self.version)


@dataclass(frozen=True)
class CrdSource:
    kinds: tuple[str, ...]
    module: str | None = None  # a Go module fetched with `go mod download`
    version: str | None = None
    sum: str | None = None
    file: str | None = None
    sha256: str | None = None
    package_data: str | None = None  # or a file shipped in compiler/data

    @property
    def label(self) -> str:
        if self.module:
            return f"{self.module}@{self.version}:{self.file}"
        return f"standbyc:compiler/data/{self.package_data}"


@dataclass(frozen=True)
class Pins:
    tools: dict[str, ToolPin]
    test_tools: dict[str, ToolPin]  # servers the tests run (not needed to use standbyc)
    test_servers_apt: tuple[str, ...]
    kubernetes_validate_version: str
    kube_available: tuple[str, ...]
    kube_default_matrix: tuple[str, ...]
    kube_prebuilt: tuple[str, ...]  # built ahead: the default matrix and an older window
    crds: tuple[CrdSource, ...]
    # For the tests only: CRD sources by role ("oldest": the oldest release whose CRD
    # accepts what standbyc emits; "too_old": the one before it).
    test_crds: dict[str, CrdSource]
    # sha256 of the pin file and of which kinds each source gives; a schema cache built
    # from other pins, or for other kinds, is stale.
    digest: str


def _raw() -> bytes:
    return resources.files("compiler").joinpath("data/pins.json").read_bytes()


def load() -> Pins:
    raw = _raw()
    data: dict[str, Any] = json.loads(raw)
    tools = {name: ToolPin(name=name, **spec) for name, spec in data["tools"].items()}
    kube = data["kubernetes"]
    # Which kinds each source provides is a column of the kinds table, not a pin.
    crds = tuple(
        CrdSource(kinds=kinds.schema_kinds(entry["module"]), **entry) for entry in data["crds"]
    ) + tuple(
        CrdSource(kinds=(kind,), package_data=crd) for kind, crd in kinds.shipped_crds().items()
    )
    return Pins(
        tools=tools,
        test_tools={n: ToolPin(name=n, **s) for n, s in data["test_tools"].items()},
        test_servers_apt=tuple(data["test_servers_apt"]),
        kubernetes_validate_version=kube["version"],
        kube_available=tuple(kube["available"]),
        kube_default_matrix=tuple(kube["default_matrix"]),
        kube_prebuilt=tuple(kube["prebuilt"]),
        crds=crds,
        test_crds={
            role: CrdSource(kinds=kinds.schema_kinds(entry["module"]), **entry)
            for role, entry in data["test_crds"].items()
            if not role.startswith("_")
        },
        digest=hashlib.sha256(raw + repr([(c.label, c.kinds) for c in crds]).encode()).hexdigest(),
    )
