"""Which validators and schema sets are present, and how to get the rest (``standbyc doctor``)."""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from typing import Any

from compiler import tools
from compiler.errors import EXIT_FAILED, EXIT_OK, StandbycError
from compiler.gate import pins as pinfile
from compiler.gate import schemas

_VERSION_ARGS = {
    "kubeconform": ["-v"],
    "promtool": ["--version"],
    "pint": ["version"],
    "kubectl-kyverno": ["version"],
    "kube-apiserver": ["--version"],
    "etcd": ["--version"],
    "go": ["version"],
}
_VERSION = re.compile(r"v?(\d+\.\d+(?:\.\d+)?)")
_REQUIRED = ("kubeconform", "promtool")


@dataclass(frozen=True)
class ToolStatus:
    name: str
    required: bool
    path: str | None
    version: str | None
    pinned: str | None
    note: str


def _version(name: str) -> str | None:
    try:
        result = tools.run(name, _VERSION_ARGS[name], ok_codes=(0,), timeout=30)
    except StandbycError:
        return None
    text = (result.stdout or result.stderr).strip()
    m = _VERSION.search(text.splitlines()[0] if text else "")
    return m.group(1) if m else (text.splitlines()[0] if text else None)


def tool_status(name: str, pins: pinfile.Pins) -> ToolStatus:
    pin = pins.tools.get(name)
    pinned = (pin.release or pin.version.removeprefix("v")) if pin else None
    path = tools.find(name)
    required = name in _REQUIRED
    if path is None:
        why = "required" if required else "optional"
        hint = tools.install_hint(name)
        return ToolStatus(name, required, None, None, pinned, f"MISSING ({why}); install: {hint}")
    version = _version(name)
    if pinned and version and version != pinned:
        note = f"version {version} differs from the pin {pinned}"
        if name == "promtool" and pin and pin.fallback_apt:
            note += f" (the Debian fallback {pin.fallback_apt} is accepted)"
    else:
        note = "ok"
    return ToolStatus(name, required, str(path), version, pinned, note)


@dataclass(frozen=True)
class SchemaStatus:
    dir: str
    state: str
    kubernetes: list[str]
    crds: list[str]
    crd_sources: list[str]
    kubernetes_validate: str | None
    kubernetes_validate_pinned: str
    default_matrix: list[str]


def schema_status(pins: pinfile.Pins) -> SchemaStatus:
    root = schemas.default_schema_dir()
    manifest = schemas.SchemaDir(root).manifest() or {}
    _, kv_version = _kubernetes_validate()
    built = list(manifest.get("kubernetes", {}))
    fresh = manifest.get("pins_sha256") == pins.digest and manifest.get("format") == schemas.FORMAT
    lacking = [v for v in pins.kube_default_matrix if v not in built]
    if not manifest:
        state = f"MISSING; build: {schemas.build_hint()}"
    elif not fresh:
        state = f"STALE (built from other pins); rebuild: {schemas.build_hint()}"
    elif lacking:
        state = f"lacks {', '.join(lacking)}; build: {schemas.build_hint()}"
    elif kv_version != pins.kubernetes_validate_version:
        state = f"ok, but kubernetes-validate {kv_version} is not the pinned one"
    else:
        state = "ok"
    return SchemaStatus(
        dir=str(root),
        state=state,
        kubernetes=built,
        crds=list(manifest.get("crds", [])),
        crd_sources=list(manifest.get("crd_sources", [])),
        kubernetes_validate=kv_version,
        kubernetes_validate_pinned=pins.kubernetes_validate_version,
        default_matrix=list(pins.kube_default_matrix),
    )


def _kubernetes_validate() -> tuple[str | None, str | None]:
    try:
        root, version = schemas.kubernetes_validate_root()
    except schemas.SchemasMissing:
        return None, None
    return str(root), version


@dataclass(frozen=True)
class DoctorOutcome:
    tools: list[ToolStatus]
    schema: SchemaStatus

    @property
    def healthy(self) -> bool:
        return all(s.path for s in self.tools if s.required) and self.schema.state.startswith("ok")

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.healthy else EXIT_FAILED

    def to_json(self) -> dict[str, Any]:
        return {
            "ok": self.healthy,
            "tools": [asdict(s) for s in self.tools],
            "schemas": asdict(self.schema),
        }

    def text(self) -> str:
        lines = []
        for s in self.tools:
            label = "required" if s.required else "optional"
            where = f"{s.version or '?'} at {s.path}" if s.path else "-"
            pinned = f" (pin {s.pinned})" if s.pinned else ""
            lines.append(f"{s.name:<12} {label:<9} {where}{pinned}: {s.note}")
        schema = self.schema
        lines.append(f"schemas      {schema.dir}: {schema.state}")
        if schema.kubernetes:
            lines.append(
                f"  kubernetes {', '.join(schema.kubernetes)}  (from kubernetes-validate "
                f"{schema.kubernetes_validate}, pin {schema.kubernetes_validate_pinned})"
            )
            lines.append(f"  crds       {', '.join(schema.crds)}")
        lines.append("ok" if self.healthy else "NOT READY: see the notes above")
        return "\n".join(lines)

    def problem(self) -> str:
        return ""
