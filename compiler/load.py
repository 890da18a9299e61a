"""Step 1 of the pipeline: read a spec file into plain data plus node positions.

The YAML is composed into nodes (libyaml's parser, when ruamel.yaml.clib is
present), each with its line and column; we flatten them into ``Positions``
keyed by field path so that any later
step can say exactly where a problem is.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.events import (
    MappingEndEvent,
    MappingStartEvent,
    SequenceEndEvent,
    SequenceStartEvent,
)
from ruamel.yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode
from ruamel.yaml.reader import ReaderError

from compiler.errors import Location, SpecError
from compiler.fsutil import resolved

MAX_SPEC_BYTES = 1024 * 1024  # a spec is a page of YAML; anything larger is a mistake
MAX_NODES = 20_000  # guards against alias expansion ("billion laughs")
MAX_DEPTH = 32  # a spec nests about 5 deep; deeper is a mistake (or an attack on the stack)
MAX_SCALAR = 4096  # characters in one value: no field needs more
# The tags plain YAML gives values; anything else (!custom, !!python/..., merge keys) is refused.
PLAIN_TAGS = frozenset(
    f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "map", "seq")
)

PathKey = tuple[str | int, ...]
Problem = tuple[PathKey, str]  # a spec check's finding: the field path and the message


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


class _Walker:
    """Turns composed YAML nodes into plain data, recording each node's position."""

    def __init__(self, yaml: YAML, file: str) -> None:
        self.yaml = yaml
        self.file = file
        self.positions = Positions()
        self.budget = MAX_NODES

    def at(self, node: Node, path: PathKey) -> Location:
        mark = node.start_mark
        return Location(self.file, mark.line + 1, mark.column + 1, dotted_path(path))

    def plain(self, node: Node, path: PathKey) -> Any:
        self.budget -= 1
        if self.budget < 0:
            raise SpecError.at(
                self.at(node, path),
                f"spec has more than {MAX_NODES} nodes (are YAML aliases expanding it?)",
            )
        if isinstance(node, MappingNode):
            if node.tag not in PLAIN_TAGS:
                raise SpecError.at(self.at(node, path), f"YAML tag {node.tag} is not supported")
            return self.mapping(node, path)
        if isinstance(node, SequenceNode):
            if node.tag not in PLAIN_TAGS:
                raise SpecError.at(self.at(node, path), f"YAML tag {node.tag} is not supported")
            items: list[Any] = []
            for index, item in enumerate(node.value):
                mark = item.start_mark
                self.positions.values[(*path, index)] = (mark.line + 1, mark.column + 1)
                items.append(self.plain(item, (*path, index)))
            return items
        if node.tag not in PLAIN_TAGS:
            merge = str(node.tag).endswith(":merge")
            what = "merge keys (<<) are" if merge else f"tag {node.tag} is"
            raise SpecError.at(
                self.at(node, path), f"YAML {what} not supported in a spec; write the value out"
            )
        if isinstance(node.value, str) and len(node.value) > MAX_SCALAR:
            raise SpecError.at(
                self.at(node, path),
                f"value is {len(node.value)} characters; at most {MAX_SCALAR} are allowed",
            )
        try:
            value = self.yaml.constructor.construct_object(node, deep=True)
        except (YAMLError, ValueError, OverflowError) as exc:
            raise SpecError.at(self.at(node, path), f"cannot read this value: {exc}") from None
        if value is None or isinstance(value, bool | int | float | str):
            return value
        # Timestamps, binary and other YAML tags have no place in a spec.
        raise SpecError.at(
            self.at(node, path),
            f"unsupported YAML value of type {type(value).__name__}; quote it to make it a string",
        )

    def mapping(self, node: MappingNode, path: PathKey) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key_node, value_node in node.value:
            key = self.plain(key_node, path)
            key_path = (*path, str(key))
            if not isinstance(key, str):
                raise SpecError.at(
                    self.at(key_node, key_path),
                    f"mapping keys must be strings, got {type(key).__name__} {key!r}",
                )
            if key in out:
                first = self.positions.keys[key_path]
                raise SpecError.at(
                    self.at(key_node, key_path),
                    f"duplicate key {key!r} (first defined at {first[0]}:{first[1]})",
                )
            kmark, vmark = key_node.start_mark, value_node.start_mark
            self.positions.keys[key_path] = (kmark.line + 1, kmark.column + 1)
            self.positions.values[key_path] = (vmark.line + 1, vmark.column + 1)
            out[key] = self.plain(value_node, key_path)
        return out


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


def _kind_of(node: Node) -> str:
    if isinstance(node, SequenceNode):
        return "a list"
    return "a single value"


def _is_null(node: Node | None) -> bool:
    return node is None or (isinstance(node, ScalarNode) and node.tag == "tag:yaml.org,2002:null")


def _at_offset(text: str, source: str, offset: int) -> Location:
    before = text[:offset]
    return Location(source, before.count("\n") + 1, offset - (before.rfind("\n") + 1) + 1)


def _check_depth(yaml: YAML, text: str, source: str) -> None:
    """Refuse deep nesting from the event stream (no recursion), before anything is built:
    composing 30,000 nested lists would exhaust the C stack."""
    depth = 0
    for event in yaml.parse(text):
        if isinstance(event, MappingStartEvent | SequenceStartEvent):
            depth += 1
            if depth > MAX_DEPTH:
                mark = event.start_mark
                raise SpecError.at(
                    Location(source, mark.line + 1, mark.column + 1),
                    f"nested more than {MAX_DEPTH} levels deep; a spec is a few levels deep",
                )
        elif isinstance(event, MappingEndEvent | SequenceEndEvent):
            depth -= 1


def load_text(text: str, source: str) -> LoadedSpec:
    yaml = YAML(typ="safe")  # libyaml's parser when ruamel.yaml.clib is present
    try:
        _check_depth(yaml, text, source)
        documents = [d for d in yaml.compose_all(text) if not _is_null(d)]
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark is not None else (1, 1)
        problem = exc.problem or exc.context or "invalid YAML"
        raise SpecError.at(Location(source, line, col), f"YAML syntax error: {problem}") from None
    except ReaderError as exc:
        where = _at_offset(text, source, exc.position)
        raise SpecError.at(where, f"YAML error: {exc.reason} (#x{exc.character:04x})") from None
    except YAMLError as exc:
        raise SpecError.at(Location(source, 1, 1), f"YAML error: {exc}") from None
    if not documents:
        raise SpecError.at(Location(source, 1, 1), "file is empty; expected a StandbySpec document")
    if len(documents) > 1:
        raise SpecError.at(
            Location(source, documents[1].start_mark.line + 1, 1),
            "a spec file holds exactly one StandbySpec document",
        )
    root = documents[0]
    if not isinstance(root, MappingNode):
        raise SpecError.at(
            Location(source, root.start_mark.line + 1, root.start_mark.column + 1),
            f"expected a mapping with apiVersion, kind, metadata and spec, got {_kind_of(root)}",
        )
    walker = _Walker(yaml, source)
    data = walker.mapping(root, ())
    return LoadedSpec(source=source, data=data, positions=walker.positions)


def load_file(path: Path, source: str | None = None) -> LoadedSpec:
    shown = source or display_path(path)
    return load_text(read_spec(path, shown), shown)


def read_spec(path: Path, shown: str) -> str:
    """The spec's text; refused (at ``shown``) when too large, unreadable or not UTF-8."""
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
    return _decode(raw, shown)


def display_path(path: Path) -> str:
    """The path relative to the working directory when it is below it (stable in output)."""
    try:
        return resolved(path).relative_to(Path.cwd().resolve()).as_posix()
    except ValueError:
        return path.as_posix()
