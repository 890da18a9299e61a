"""Shared rendering machinery: jinja environment, quoting, parse-back checks.

Templates interpolate every value through the ``q`` filter, which writes it
as a JSON scalar or flow collection. JSON is valid YAML, so a value such as
``"a\\nkind: Secret"`` stays one string and can never add structure. The
rendered text is then parsed back and checked against the object the
renderer meant to produce (one document, the apiVersion and top-level keys of
its row in ``compiler.kinds``, the expected name, and nothing else in
``metadata``: namespace, labels and annotations are added in one pass after
rendering). What a renderer returns, ``Emitted``, is defined in ``compiler.emitted``.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import jinja2
import yaml

from compiler import kinds
from compiler.errors import TemplateError
from compiler.reuse import store
from compiler.yamlio import double_quoted, read_back


def packaged_templates() -> Path:
    """Templates inside an installed wheel, else the repository's ``templates/``."""
    here = Path(__file__).resolve().parent.parent
    inside = here / "templates"
    return inside if inside.is_dir() else here.parent / "templates"


def quote(value: Any) -> str:
    """Render a value as a YAML-safe flow scalar or collection: strings double-quoted with
    YAML's own escapes (so any Unicode string, an emoji included, reads back as itself),
    numbers, booleans and null as JSON writes them."""
    if isinstance(value, jinja2.Undefined):
        str(value)  # StrictUndefined raises here, naming the missing variable
    if isinstance(value, str):
        return double_quoted(value)
    if isinstance(value, dict):
        parts = (f"{quote(str(k))}: {quote(v)}" for k, v in value.items())
        return "{" + ", ".join(parts) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(quote(v) for v in value) + "]"
    try:
        return json.dumps(value)
    except (TypeError, ValueError) as exc:
        raise jinja2.TemplateRuntimeError(f"cannot write this value as YAML: {exc}") from None


class Renderer:
    """Renders named templates into checked objects.

    ``kube_versions``: the Kubernetes versions the objects are for, when the caller names
    them (``--kube-version``, Argo CD's ``KUBE_VERSION``); they win over the spec's
    ``validation.kubernetesVersions``. Empty: the spec's, else the current default matrix.
    """

    def __init__(self, override_dir: Path | None = None, kube_versions: Sequence[str] = ()) -> None:
        self.kube_versions = tuple(kube_versions)
        search = [str(override_dir)] if override_dir else []
        search.append(str(packaged_templates()))
        self._search = [Path(d) for d in search]
        self._digest: str | None = None
        self.env = jinja2.Environment(
            loader=jinja2.FileSystemLoader(search),
            undefined=jinja2.StrictUndefined,
            autoescape=False,
            keep_trailing_newline=True,
            trim_blocks=True,
            lstrip_blocks=True,
        )
        self.env.filters["q"] = quote
        # Templates see only the context a renderer passes (no jinja globals such as
        # ``namespace``, which would silently stand in for a missing value).
        self.env.globals.clear()

    @property
    def digest(self) -> str:
        """The templates this renderer reads, as a cache key part."""
        if self._digest is None:
            parts = [store.tree_digest(directory) for directory in self._search]
            self._digest = store.key("templates", *parts, *self.kube_versions)
        return self._digest

    def render_text(self, template: str, context: dict[str, Any]) -> str:
        try:
            return self.env.get_template(template).render(**context)
        except jinja2.TemplateSyntaxError as exc:
            raise TemplateError(f"{exc.filename or template}:{exc.lineno}: {exc.message}") from None
        except jinja2.TemplateNotFound as exc:
            raise TemplateError(f"template not found: {exc.name}") from None
        except jinja2.TemplateError as exc:
            raise TemplateError(f"{_template_position(template)}: {exc}") from None

    def render(self, template: str, context: dict[str, Any], kind: str) -> dict[str, Any]:
        """Render one object of ``kind`` named ``context["name"]``, checked for shape."""
        text = self.render_text(template, context)
        return check_shape(text, template, kinds.get(kind), context["name"])

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
    """The rendered text's documents, read as Kubernetes reads a manifest (YAML 1.1)."""
    try:
        return read_back(text)
    except yaml.YAMLError as exc:
        raise TemplateError(f"{template}: rendered text is not valid YAML: {exc}") from None
    except (ValueError, TypeError) as exc:
        raise TemplateError(
            f"{template}: rendered text is not plain data (no tags, aliases, merge keys, "
            f"duplicate keys or complex keys): {exc}"
        ) from None


def check_shape(text: str, template: str, kind: kinds.Kind, name: str) -> dict[str, Any]:
    """Exactly one object of ``kind`` named ``name``, with only the kind's top-level keys
    (the metadata pass adds the namespace later)."""
    docs = _parse(text, template)
    if len(docs) != 1 or not isinstance(docs[0], dict):
        raise TemplateError(
            f"{template}: rendered {len(docs)} documents, expected exactly one {kind.kind}"
        )
    obj: dict[str, Any] = docs[0]
    meta = obj.get("metadata")
    got = (
        obj.get("apiVersion"),
        obj.get("kind"),
        meta.get("name") if isinstance(meta, dict) else None,
        meta.get("namespace") if isinstance(meta, dict) else None,
    )
    want = (kind.api_version, kind.kind, name, None)
    if got != want:
        raise TemplateError(
            f"{template}: rendered apiVersion/kind/name/namespace {got}, expected {want}"
        )
    if isinstance(meta, dict) and set(meta) != {"name"}:
        raise TemplateError(
            f"{template}: metadata may hold only the name (got {sorted(meta)}); namespace, "
            "labels and annotations are added after rendering"
        )
    unexpected = sorted(set(obj) - kind.top_keys)
    if unexpected:
        raise TemplateError(f"{template}: unexpected top-level keys {unexpected}")
    return obj


def filename(kind: str, name: str) -> str:
    return f"{kind.lower()}-{name}.yaml"
