"""The compile side of reuse: what a spec's text parsed to, and what its data rendered to,
remembered in the store (``compiler.reuse.store``) so an unchanged spec is neither parsed
nor rendered again. ``compiler.pipeline.compile_cached`` wraps the plain compile
(``compile_text``) with it, once.

A text's entry is keyed on the text, the name it is shown under, the source its headers
name, standbyc (with its libraries) and the templates; a rendering's on the parsed data, the
source, standbyc and the templates. An entry that is not what this code wrote (damaged, or
another program's) is a miss. With reuse off (``STANDBYC_REUSE=off``) nothing is looked up
or stored.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from compiler.emitted import Emitted
from compiler.errors import Diagnostic, Location
from compiler.reuse import store


@dataclass(frozen=True)
class Parsed:
    """What a spec's text gave: its data and the locations compiling it reports."""

    data: dict[str, Any]
    name_location: Location
    warnings: tuple[Diagnostic, ...]


class SpecMemo:
    """One compile's lookups (``templates``: the renderer's digest)."""

    def __init__(self, templates: str) -> None:
        self.kept = store.Store("compile")
        self.templates = templates

    def _text_key(self, shown: str, source: str, text: str) -> str:
        return store.key("spec-text", store.code_digest(), self.templates, shown, source, text)

    def seen(self, shown: str, source: str, text: str) -> bool:
        """Whether this text was compiled before (its rendering is remembered too)."""
        return self.kept.enabled and self.kept.has(self._text_key(shown, source, text))

    def parsed(self, shown: str, source: str, text: str) -> Parsed | None:
        if not self.kept.enabled:
            return None
        return _parsed(self.kept.get_json(self._text_key(shown, source, text)))

    def remember_parsed(self, shown: str, source: str, text: str, parsed: Parsed) -> None:
        if not self.kept.enabled or not _json_exact(parsed.data):
            return
        self.kept.put_json(
            self._text_key(shown, source, text),
            {
                "data": parsed.data,
                "name": _location_json(parsed.name_location),
                "warnings": [[_location_json(w.location), w.message] for w in parsed.warnings],
            },
        )

    def _render_key(self, source: str, data: dict[str, Any]) -> str:
        text = json.dumps(data, default=repr, ensure_ascii=False)
        return store.key("compile", store.code_digest(), self.templates, source, text)

    def rendering(
        self, source: str, data: dict[str, Any], directory: str
    ) -> tuple[list[Emitted], dict[str, str]] | None:
        if not self.kept.enabled:
            return None
        return _rendering(self.kept.get_json(self._render_key(source, data)), directory)

    def remember_rendering(
        self, source: str, data: dict[str, Any], emitted: list[Emitted], files: dict[str, str]
    ) -> None:
        if not self.kept.enabled:
            return
        # Not the test data: only a cold gate reads it (to prove sharing sound), and a
        # spec found here has its tests found by their exact bytes; reading it back would
        # cost every unchanged compile.
        objects = [
            {"relpath": e.relpath, "obj": e.obj, "text": e.text}
            for e in emitted
            if not e.is_test_data
        ]
        self.kept.put_json(self._render_key(source, data), {"files": files, "objects": objects})


def _json_exact(data: dict[str, Any]) -> bool:
    """Whether JSON gives ``data`` back unchanged (only then is it remembered)."""
    try:
        return bool(json.loads(json.dumps(data)) == data)
    except (TypeError, ValueError):
        return False


def _location_json(loc: Location) -> list[Any]:
    return [loc.file, loc.line, loc.column, loc.path]


def _location(value: Any) -> Location | None:
    if not isinstance(value, list) or len(value) != 4:
        return None
    file, line, column, path = value
    numbers = all(n is None or (isinstance(n, int) and not isinstance(n, bool)) for n in value[1:3])
    if not (isinstance(file, str) and isinstance(path, str) and numbers):
        return None
    return Location(file, line, column, path)


def _parsed(hit: Any) -> Parsed | None:
    """An entry as a ``Parsed``, or None when it is not one: then the text is parsed again."""
    if not isinstance(hit, dict) or not isinstance(hit.get("data"), dict):
        return None
    name, listed = _location(hit.get("name")), hit.get("warnings")
    if name is None or not isinstance(listed, list):
        return None
    warnings: list[Diagnostic] = []
    for item in listed:
        if not isinstance(item, list) or len(item) != 2 or not isinstance(item[1], str):
            return None
        if (where := _location(item[0])) is None:
            return None
        warnings.append(Diagnostic(where, item[1]))
    return Parsed(hit["data"], name, tuple(warnings))


def _rendering(hit: Any, directory: str) -> tuple[list[Emitted], dict[str, str]] | None:
    """An entry as objects and files, or None when it is not one: then the spec is
    rendered again."""
    if not isinstance(hit, dict):
        return None
    files, objects = hit.get("files"), hit.get("objects")
    if not isinstance(files, dict) or not isinstance(objects, list):
        return None
    inside = (k.startswith(f"{directory}/") and isinstance(v, str) for k, v in files.items())
    if not all(inside):
        return None
    emitted: list[Emitted] = []
    for o in objects:
        if not isinstance(o, dict) or not isinstance(o.get("relpath"), str):
            return None
        if not isinstance(o.get("obj"), dict) or not isinstance(o.get("text"), str | None):
            return None
        emitted.append(Emitted(o["relpath"], o["obj"], text=o["text"]))
    return emitted, files
