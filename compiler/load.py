"""Step 1 of the pipeline: read a spec file into plain data plus node positions.

ruamel.yaml keeps a line and column for every mapping key, value and sequence
item; we flatten them into ``Positions`` keyed by field path so that any later
step can say exactly where a problem is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError

from compiler.errors import Location, SpecError

MAX_SPEC_BYTES = 1024 * 1024  # a spec is a page of YAML; anything larger is a mistake
MAX_NODES = 20_000  # guards against alias expansion ("billion laughs")

PathKey = tuple[str | int, ...]


@dataclass(frozen=True)
class Positions:
    """1-based (line, column) of each node, by field path; keys point at the key itself."""

    values: dict[PathKey, tuple[int, int]] = field(default_factory=dict)
    keys: dict[PathKey, tuple[int, int]] = field(default_factory=dict)

    def locate(self, file: str, path: PathKey, *, prefer_key: bool = False) -> Location:
        """The closest known position for ``path`` (walking up to its parents)."""
        dotted = dotted_path(path)
        probe = tuple(path)
        while True:
            table = (self.keys, self.values) if prefer_key else (self.values, self.keys)
            for positions in table:
                if probe in positions:
                    line, col = positions[probe]
                    return Location(file, line, col, dotted)
            if not probe:
                return Location(file, 1, 1, dotted)
            probe = probe[:-1]


def dotted_path(path: PathKey) -> str:
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += ("." if out else "") + part
    return out


@dataclass(frozen=True)
class LoadedSpec:
    source: str  # the path as shown to the user
    data: dict[str, Any]
    positions: Positions


def _to_plain(node: Any, path: PathKey, pos: Positions, budget: list[int], file: str) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise SpecError.at(
            pos.locate(file, path),
            f"spec has more than {MAX_NODES} nodes (are YAML aliases expanding it?)",
        )
    if isinstance(node, CommentedMap):
        out: dict[str, Any] = {}
        for key in node:
            line, col = node.lc.key(key)
            key_path = (*path, str(key))
            pos.keys[key_path] = (line + 1, col + 1)
            vline, vcol = node.lc.value(key)
            pos.values[key_path] = (vline + 1, vcol + 1)
            if not isinstance(key, str):
                raise SpecError.at(
                    Location(file, line + 1, col + 1, dotted_path(key_path)),
                    f"mapping keys must be strings, got {type(key).__name__} {key!r}",
                )
            out[key] = _to_plain(node[key], key_path, pos, budget, file)
        return out
    if isinstance(node, CommentedSeq):
        items: list[Any] = []
        for index, item in enumerate(node):
            line, col = node.lc.item(index)
            pos.values[(*path, index)] = (line + 1, col + 1)
            items.append(_to_plain(item, (*path, index), pos, budget, file))
        return items
    if node is None or isinstance(node, bool | int | float):
        return node
    if isinstance(node, str):
        return str(node)  # drop ruamel's scalar subclasses
    # Timestamps, binary and other YAML tags have no place in a spec.
    raise SpecError.at(
        pos.locate(file, path),
        f"unsupported YAML value of type {type(node).__name__}; quote it to make it a string",
    )


def _decode(raw: bytes, source: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line = before.count(b"\n") + 1
        col = exc.start - (before.rfind(b"\n") + 1) + 1
        raise SpecError.at(
            Location(source, line, col),
            f"file is not valid UTF-8 (byte 0x{raw[exc.start]:02x} at offset {exc.start})",
        ) from None


def _kind_of(node: Any) -> str:
    if isinstance(node, CommentedSeq):
        return "a list"
    if isinstance(node, str):
        return "a string"
    return "a " + type(node).__name__


def load_text(text: str, source: str) -> LoadedSpec:
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    try:
        documents = list(yaml.load_all(text))
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        problem = exc.problem or exc.context or "invalid YAML"
        raise SpecError.at(Location(source, line, col), f"YAML syntax error: {problem}") from None
    except YAMLError as exc:
        raise SpecError.at(Location(source, 1, 1), f"YAML error: {exc}") from None
    documents = [d for d in documents if d is not None]
    if not documents:
        raise SpecError.at(Location(source, 1, 1), "file is empty; expected a StandbySpec document")
    if len(documents) > 1:
        second = documents[1]
        line = second.lc.line + 1 if hasattr(second, "lc") else 1
        raise SpecError.at(
            Location(source, line, 1), "a spec file holds exactly one StandbySpec document"
        )
    root = documents[0]
    if not isinstance(root, CommentedMap):
        raise SpecError.at(
            Location(source, 1, 1),
            f"expected a mapping with apiVersion, kind, metadata and spec, got {_kind_of(root)}",
        )
    positions = Positions()
    data = _to_plain(root, (), positions, [MAX_NODES], source)
    return LoadedSpec(source=source, data=data, positions=positions)


def load_file(path: Path, source: str | None = None) -> LoadedSpec:
    shown = source or display_path(path)
    try:
        size = path.stat().st_size
        if size > MAX_SPEC_BYTES:
            raise SpecError.at(
                Location(shown, 1, 1),
                f"file is {size} bytes; a spec may be at most {MAX_SPEC_BYTES} bytes",
            )
        raw = path.read_bytes()
    except OSError as exc:
        raise SpecError.at(Location(shown), f"cannot read spec: {exc.strerror}") from None
    return load_text(_decode(raw, shown), shown)


def display_path(path: Path) -> str:
    """The path relative to the working directory when it is below it (stable in output)."""
    try:
        return path.resolve().relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()
