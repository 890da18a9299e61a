"""Shared rendering machinery: jinja environment, quoting, parse-back checks.

Templates interpolate every value through the ``q`` filter, which writes it
as a JSON scalar or flow collection. JSON is valid YAML, so a value such as
``"a\\nkind: Secret"`` stays one string and can never add structure. The
rendered text is then parsed back and checked against the object the
renderer meant to produce (one document, the expected apiVersion, kind, name
and namespace, only the expected top-level keys).
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
from ruamel.yaml.error import YAMLError

from compiler import names
from compiler.errors import TemplateError
from compiler.plan import Plan
from compiler.yamlio import parse_one

ALLOWED_TOP_KEYS = frozenset(
    {
        "apiVersion",
        "kind",
        "metadata",
        "spec",
        "data",
        "rules",
        "resources",
        "patches",
        "automountServiceAccountToken",
        "labels",
        "commonAnnotations",
    }
)


def packaged_templates() -> Path:
    """Templates inside an installed wheel, else the repository's ``templates/``."""
    here = Path(__file__).resolve().parent.parent
    inside = here / "templates"
    return inside if inside.is_dir() else here.parent / "templates"


def quote(value: Any) -> str:
    """Render a value as a YAML-safe JSON scalar or flow collection."""
    if isinstance(value, jinja2.Undefined):
        str(value)  # StrictUndefined raises here, naming the missing variable
    if isinstance(value, tuple):
        value = list(value)
    return json.dumps(value, ensure_ascii=True, sort_keys=False)


@dataclass(frozen=True)
class Expect:
    api_version: str
    kind: str
    name: str
    namespace: str | None  # None for cluster-scoped objects and kustomize files


@dataclass(frozen=True)
class Emitted:
    """One output file: a path below the spec's output directory and its object."""

    relpath: str
    obj: dict[str, Any]
    is_resource: bool = True  # listed in kustomization.yaml

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind", ""))

    @property
    def name(self) -> str:
        meta = self.obj.get("metadata") or {}
        return str(meta.get("name", ""))


class Renderer:
    """Renders named templates into checked objects."""

    def __init__(self, override_dir: Path | None = None) -> None:
        search = [str(override_dir)] if override_dir else []
        search.append(str(packaged_templates()))
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(search),
            undefined=jinja2.StrictUndefined,
            autoescape=False,
            keep_trailing_newline=True,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters["q"] = quote

    def render_text(self, template: str, context: dict[str, Any]) -> str:
        try:
            return self.env.get_template(template).render(**context)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"{exc.filename or template}:{exc.lineno}: {exc.message}") from None
        except jinja2.TemplateNotFound as exc:
            raise TemplateError(f"template not found: {exc.name}") from None
        except jinja2.TemplateError as exc:
            raise TemplateError(f"{_template_position(template)}: {exc}") from None

    def render(self, template: str, context: dict[str, Any], expect: Expect) -> dict[str, Any]:
        text = self.render_text(template, context)
        return check_shape(text, template, expect)

    def render_data(self, template: str, context: dict[str, Any]) -> Any:
        """Render a template that holds plain data (not a Kubernetes object)."""
        text = self.render_text(template, context)
        docs = _parse(text, template)
        if len(docs) != 1:
            raise TemplateError(f"{template}: rendered {len(docs)} documents, expected 1")
        return docs[0]


def _template_position(template: str) -> str:
    """``template:line`` from the jinja frame in the current traceback, if any."""
    tb = sys.exc_info()[2]
    line = None
    while tb is not None:
        if tb.tb_frame.f_code.co_filename.endswith(template):
            line = tb.tb_lineno
        tb = tb.tb_next
    return f"{template}:{line}" if line is not None else template


def _parse(text: str, template: str) -> list[Any]:
    try:
        return parse_one(text)
    except YAMLError as exc:
        raise TemplateError(f"{template}: rendered text is not valid YAML: {exc}") from None


def check_shape(text: str, template: str, expect: Expect) -> dict[str, Any]:
    docs = _parse(text, template)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise TemplateError(
            f"{template}: rendered {len(docs)} documents, expected exactly one {expect.kind}"
        )
    obj: dict[str, Any] = docs[0]
    meta = obj.get("metadata")
    got = (
        obj.get("apiVersion"),
        obj.get("kind"),
        meta.get("name") if isinstance(meta, dict) else None,
        meta.get("namespace") if isinstance(meta, dict) else None,
    )
    want = (expect.api_version, expect.kind, expect.name, expect.namespace)
    if got != want:
        raise TemplateError(
            f"{template}: rendered apiVersion/kind/name/namespace {got}, expected {want}"
        )
    unexpected = sorted(set(obj) - ALLOWED_TOP_KEYS)
    if unexpected:
        raise TemplateError(f"{template}: unexpected top-level keys {unexpected}")
    return obj


def filename(kind: str, name: str) -> str:
    return f"{kind.lower()}-{name}.yaml"


def meta(
    plan: Plan, *, wave: int | None = None, extra: dict[str, str] | None = None
) -> dict[str, Any]:
    """Template context for ``metadata``: name-independent labels and annotations."""
    annotations = dict(plan.spec.spec.common_annotations)
    if wave is not None:
        annotations["argocd.argoproj.io/sync-wave"] = str(wave)
    annotations.update(extra or {})
    return {
        "namespace": plan.namespace,
        "labels": names.common_labels(plan.spec),
        "annotations": annotations,
    }
