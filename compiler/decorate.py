"""Step 5, after rendering: metadata in one pass, then checks on what will be written.

Renderers return bare objects (a name and a body). ``decorate`` adds, per the
kind's row in ``compiler.kinds``, the namespace, the labels and annotations
every object carries, the object's own ones and the Argo CD sync wave.
``name_problem`` enforces each kind's name limit on the emitted names, and
``serialize`` writes each file and proves it parses back to exactly the
object rendered for it, so no value can add a document or a field. ``written`` does all
of it for one spec, in apply order (``order``), with the ``kustomization.yaml`` listing
what is applied.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any
from xml.etree import ElementTree

from compiler import kinds, yamlio
from compiler.emitted import Emitted
from compiler.errors import EXIT_INTERNAL, Location, SpecError, StandbycError

KUSTOMIZATION = "kustomization.yaml"


@dataclass(frozen=True)
class Common:
    """What every decorated object of one spec (or of the shared files) carries."""

    namespace: str | None = None
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)


class OutputMismatch(StandbycError):
    """An emitted file does not read back as the object standbyc rendered for it."""

    exit_code = EXIT_INTERNAL


def decorate(e: Emitted, common: Common) -> Emitted:
    row = kinds.BY_NAME.get(e.kind)
    if row is None or not row.decorated or e.is_test_data:
        return e
    meta: dict[str, Any] = dict(e.obj.get("metadata") or {})
    out: dict[str, Any] = {"name": meta.pop("name")}
    if row.namespaced and common.namespace is not None:
        out["namespace"] = common.namespace
    labels = {**common.labels, **meta.pop("labels", {}), **e.labels}
    annotations = {**common.annotations, **meta.pop("annotations", {})}
    if row.wave is not None:
        annotations[kinds.WAVE_ANNOTATION] = str(row.wave)
    if row.sync_options is not None:
        annotations[kinds.SYNC_OPTIONS_ANNOTATION] = row.sync_options
    annotations.update(e.annotations)
    if labels:
        out["labels"] = labels
    if annotations:
        out["annotations"] = annotations
    out.update(meta)
    return replace(e, obj={**e.obj, "metadata": out}, labels={}, annotations={})


def name_problem(emitted: Iterable[Emitted]) -> str | None:
    """An emitted name its kind does not accept: one that must start with a letter and does
    not, else the one furthest over its kind's length limit (and how many others are)."""
    rows = [(e, row) for e in emitted if (row := kinds.BY_NAME.get(e.kind)) is not None]
    for e, row in rows:
        if row.name_letter_first and not e.name[:1].isalpha():
            return (
                f"derived {e.kind} name {e.name!r} must start with a letter ({row.name_reason}), "
                "so start metadata.name with one"
            )
    over = [
        (len(e.name) - row.name_limit, e, row) for e, row in rows if len(e.name) > row.name_limit
    ]
    if not over:
        return None
    _, e, row = max(over, key=lambda item: item[0])
    others = len(over) - 1
    more = {0: "", 1: " (1 more object is too long)"}.get(
        others, f" ({others} more objects are too long)"
    )
    why = f" ({row.name_reason})" if row.name_reason else ""
    # The way around an optional object helps only when it is the one name too long.
    instead = f" (or set {e.without})" if e.without and not others else ""
    return (
        f"derived {e.kind} name {e.name!r} is {len(e.name)} characters; a {e.kind} name has "
        f"at most {row.name_limit}{why}, so shorten metadata.name{instead}{more}"
    )


def serialize(obj: Any, source: str, where: str) -> str:
    """The file's text: header and canonical YAML, checked to parse back to ``obj``."""
    text = yamlio.document(obj, source)
    try:
        back = yamlio.read_back(text)
    except Exception as exc:  # any parse failure is the same bug as a mismatch
        raise OutputMismatch(f"{where}: emitted text does not parse: {exc}") from None
    if back != [obj]:
        raise OutputMismatch(
            f"{where}: emitted text reads back as {len(back)} document(s) that differ from "
            "the object standbyc rendered; nothing was written (a bug in standbyc)"
        )
    return text


def serialize_text(body: str, source: str, where: str) -> str:
    """A Markdown or SVG file: a comment header, then the body; an SVG must be well-formed."""
    text = yamlio.comment_header(source) + body
    if where.endswith(".svg"):
        try:
            ElementTree.fromstring(text)
        except ElementTree.ParseError as exc:
            raise OutputMismatch(f"{where}: emitted SVG is not well-formed: {exc}") from None
    return text


def order(items: Iterable[Emitted]) -> list[Emitted]:
    """Apply order (the kinds table), then name; data files last."""
    return sorted(items, key=lambda e: (kinds.rank(e.kind), e.name, e.relpath))


def kustomization(resource_paths: Sequence[str]) -> dict[str, Any]:
    return {
        "apiVersion": "kustomize.config.k8s.io/v1beta1",
        "kind": "Kustomization",
        "resources": list(resource_paths),
    }


def written(
    rendered: Iterable[Emitted], common: Common, source: str, directory: str, name: Location
) -> tuple[list[Emitted], dict[str, str]]:
    """One spec's rendered objects decorated, in apply order (the validators' test data
    among them), and the files below ``directory`` that hold them, with the
    ``kustomization.yaml`` listing what is applied. A derived name its kind does not
    accept is a problem at ``name`` (where the spec writes metadata.name)."""
    emitted = order(decorate(e, common) for e in rendered)
    if problem := name_problem(emitted):
        raise SpecError.at(name, problem)
    listing = kustomization([e.relpath for e in emitted if e.is_resource])
    each = [*((e.relpath, e.obj, e.text) for e in emitted), (KUSTOMIZATION, listing, None)]
    files = {
        f"{directory}/{rel}": serialize(obj, source, f"{directory}/{rel}")
        if text is None
        else serialize_text(text, source, f"{directory}/{rel}")
        for rel, obj, text in each
    }
    return emitted, files
