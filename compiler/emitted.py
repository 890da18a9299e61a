"""What each step after planning hands on: ``Emitted``, one output file of a spec.

Renderers (``compiler.render``) make them, ``compiler.decorate`` adds their metadata, the
pipeline orders and writes them, and the compile's cache (``compiler.reuse.compiled``)
keeps them; so they live below all of those.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from compiler import kinds


@dataclass(frozen=True)
class Emitted:
    """One output file: a path below the spec's output directory and its object.

    ``labels`` and ``annotations`` are the object's own; the metadata pass after
    rendering adds the namespace and the labels and annotations every object carries.
    """

    relpath: str
    obj: dict[str, Any]
    labels: dict[str, str] = field(default_factory=dict)
    annotations: dict[str, str] = field(default_factory=dict)
    text: str | None = None  # a document for people (Markdown, SVG) instead of ``obj``
    # For an object the spec can turn off: how, for messages about it (its name too long).
    without: str = ""

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind", ""))

    @property
    def name(self) -> str:
        meta = self.obj.get("metadata") or {}
        return str(meta.get("name", ""))

    @property
    def is_test_data(self) -> bool:
        """Under tests/: input for a validator (promtool, kyverno), never applied or decorated,
        whatever its kind."""
        return self.relpath.startswith("tests/")

    @property
    def is_resource(self) -> bool:
        """Listed in kustomization.yaml: an object of an applied kind (not a data file)."""
        row = kinds.BY_NAME.get(self.kind)
        return row is not None and row.applied and not self.is_test_data
