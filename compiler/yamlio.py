"""Canonical YAML out, safe YAML in: the only place standbyc formats YAML.

Output is deterministic: keys keep the order the object was built in, except
that ``apiVersion, kind, metadata`` always lead (as kubectl users expect).
Strings that a YAML 1.1 reader (Kubernetes' sigs.k8s.io/yaml, Argo CD) would
turn into booleans, numbers or null are quoted, and multi-line strings use
literal blocks so PromQL and embedded files stay readable in review.
"""

from __future__ import annotations

import functools
import json
import math
import re
from collections.abc import Callable
from typing import Any

import yaml as pyyaml
from ruamel.yaml import YAML

_LOADER = getattr(pyyaml, "CSafeLoader", pyyaml.SafeLoader)  # C where libyaml is bundled
HEADER_BODY = "standbyc: generated — do not edit."
HEADER_MARK = "# " + HEADER_BODY  # YAML files
COMMENT_MARK = "<!-- " + HEADER_BODY  # Markdown and SVG files
LEADING_KEYS = ("apiVersion", "kind", "metadata")
METADATA_KEYS = ("name", "namespace", "labels", "annotations")

# YAML 1.1 implicit types that a 1.2 emitter would leave unquoted.
_YAML11_SPECIAL = re.compile(
    r"""^(?:y|Y|yes|Yes|YES|n|N|no|No|NO|true|True|TRUE|false|False|FALSE
    |on|On|ON|off|Off|OFF|~|null|Null|NULL|
    [-+]?(?:0b[0-1_]+|0[0-7_]+|0x[0-9a-fA-F_]+|[0-9][0-9_]*(?::[0-5]?[0-9])+(?:\.[0-9_]*)?)
    |[-+]?(?:[0-9][0-9_]*)?\.[0-9_]*(?:[eE][-+]?[0-9]+)?|[-+]?[0-9][0-9_]*(?:[eE][-+]?[0-9]+)?
    |[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN)|=|<<
    |[0-9]{4}-[0-9]{1,2}-[0-9]{1,2}.*)$""",
    re.VERBOSE,
)


# Plain (unquoted) scalars: printable ASCII that reads back as the same string in both
# YAML 1.1 and 1.2 block context. Everything else is written as a JSON string, which is
# valid YAML everywhere.
_PLAIN_BODY = re.compile(r"^[\x20-\x7e]*$")
_INDICATORS = set("-?:,[]{}#&*!|>'\"%@`")
_LITERAL_SAFE = re.compile(r"^[\x20-\x7e\n]*$")


def _ordered(obj: Any) -> Any:
    """``obj`` with ``apiVersion, kind, metadata`` first, and ``metadata``'s own leading
    keys first in it; everything below stays in the order it was built in."""
    if not isinstance(obj, dict):
        return obj
    lead = [k for k in LEADING_KEYS if k in obj]
    out = {k: obj[k] for k in lead}
    out.update(obj)
    metadata = out.get("metadata")
    if isinstance(metadata, dict):
        lead_meta = {k: metadata[k] for k in METADATA_KEYS if k in metadata}
        lead_meta.update(metadata)
        out["metadata"] = lead_meta
    return out


def _float(value: float) -> str:
    if math.isnan(value):
        return ".nan"
    if math.isinf(value):
        return ".inf" if value > 0 else "-.inf"
    # YAML 1.1 floats need a "." in the mantissa (and a signed exponent, which repr gives).
    mantissa, e, exponent = repr(value).partition("e")
    if "." not in mantissa:
        mantissa += ".0"
    return mantissa + e + exponent


def _scalar(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return _float(value)
    return _string(str(value))


@functools.lru_cache(maxsize=1 << 16)
def _string(text: str) -> str:
    """A string as a scalar: plain where it reads back as itself, else double-quoted
    (label names, series and keys repeat across a spec's files: each is decided once)."""
    return text if _is_plain(text) else double_quoted(text)


_PRINTABLE = re.compile(r"[\x20-\x7e]*")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}


def double_quoted(text: str) -> str:
    """A YAML double-quoted scalar in printable ASCII (YAML's own escapes, not JSON's:
    characters beyond the BMP are one \\U escape, not a surrogate pair)."""
    if _PRINTABLE.fullmatch(text):  # most are: only the quote and the backslash need escapes
        return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
    out = []
    for char in text:
        code = ord(char)
        if char in _ESCAPES:
            out.append(_ESCAPES[char])
        elif 0x20 <= code < 0x7F:
            out.append(char)
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04x}")
        else:
            out.append(f"\\U{code:08x}")
    return '"' + "".join(out) + '"'


def _is_plain(text: str) -> bool:
    if not text or not _PLAIN_BODY.match(text) or text != text.strip():
        return False
    first_ok = text[0] not in _INDICATORS or (
        text[0] == "-" and len(text) > 1 and text[1] != " " and not text.startswith("---")
    )
    return (
        first_ok
        and ": " not in text
        and " #" not in text
        and not text.endswith(":")
        and not _YAML11_SPECIAL.match(text)
        and not text.startswith("0o")
    )


def _literal(value: Any) -> str | None:
    """The ``|`` header for a multi-line string that reads back exactly, else None."""
    if not isinstance(value, str) or "\n" not in value:
        return None
    if not _LITERAL_SAFE.match(value) or "\r" in value or value[0] in " \t\n":
        return None  # would need escapes or an indentation indicator
    body = value[:-1] if value.endswith("\n") else value
    if body.endswith("\n") or any(line != line.rstrip() for line in body.split("\n")):
        return None  # would need keep-chomping, or trailing blanks would be invisible
    return "|" if value.endswith("\n") else "|-"


def _entry(prefix: str, value: Any, indent: int, lines: list[str]) -> None:
    """``prefix`` (``key:`` or ``- key:``) and its value, nested at ``indent`` + 2."""
    if isinstance(value, dict) and value:
        lines.append(prefix)
        _mapping(value, indent + 2, lines)
    elif isinstance(value, list) and value:
        lines.append(prefix)
        _sequence(value, indent + 2, lines)
    elif (style := _literal(value)) is not None:
        lines.append(f"{prefix} {style}")
        pad = " " * (indent + 2)
        lines.extend(pad + line if line else "" for line in value.rstrip("\n").split("\n"))
    else:
        lines.append(f"{prefix} {_flow_empty(value)}")


def _flow_empty(value: Any) -> str:
    if isinstance(value, dict):
        return "{}"
    if isinstance(value, list):
        return "[]"
    return _scalar(value)


def _mapping(node: dict[str, Any], indent: int, lines: list[str]) -> None:
    pad = " " * indent
    for key, value in node.items():
        _entry(f"{pad}{_scalar(str(key))}:", value, indent, lines)


def _sequence(items: list[Any], indent: int, lines: list[str]) -> None:
    pad = " " * indent
    for item in items:
        if isinstance(item, dict) and item:
            for i, (key, value) in enumerate(item.items()):
                lead = f"{pad}- " if i == 0 else f"{pad}  "
                _entry(f"{lead}{_scalar(str(key))}:", value, indent + 2, lines)
        elif isinstance(item, list) and item:
            lines.append(f"{pad}-")
            _sequence(item, indent + 2, lines)
        elif (style := _literal(item)) is not None:
            lines.append(f"{pad}- {style}")
            lines.extend(
                " " * (indent + 2) + line if line else "" for line in item.rstrip("\n").split("\n")
            )
        else:
            lines.append(f"{pad}- {_flow_empty(item)}")


def dump(obj: Any) -> str:
    """Block-style YAML for plain data (dict, list, str, int, float, bool, None)."""
    lines: list[str] = []
    node = _ordered(obj)
    if isinstance(node, dict) and node:
        _mapping(node, 0, lines)
    elif isinstance(node, list) and node:
        _sequence(node, 0, lines)
    else:
        lines.append(_flow_empty(node))
    return "\n".join(lines) + "\n"


_PLAIN_SOURCE = re.compile(r"^[\x21\x23-\x7e][\x20-\x7e]*$")


def _shown(source: str) -> str:
    """The source as a header writes it: as is, or as a JSON string when it is not plain
    printable ASCII (a newline, a U+2028, a name that is not UTF-8) or holds ``--``, so no
    file name can end the comment and inject a document."""
    if _PLAIN_SOURCE.match(source) and source == source.strip() and "--" not in source:
        return source
    return json.dumps(source, ensure_ascii=True).replace("-", "\\u002d")


def header(source: str) -> str:
    """The first line of every YAML file standbyc writes."""
    return f"{HEADER_MARK} Source: {_shown(source)}\n"


def comment_header(source: str) -> str:
    """The first line of every Markdown or SVG file standbyc writes."""
    return f"{COMMENT_MARK} Source: {_shown(source)} -->\n"


def document(obj: Any, source: str) -> str:
    return header(source) + dump(obj)


def parse_one(text: str) -> list[Any]:
    """All documents in ``text`` with a safe loader (no tags, no Python objects)."""
    yaml = YAML(typ="safe")  # libyaml parser when ruamel.yaml.clib is present
    return [d for d in yaml.load_all(text) if d is not None]


def read_back(text: str) -> list[Any]:  # noqa: PLR0912 -- one loop, run per event
    """All documents in ``text`` as a YAML 1.1 reader sees them (Kubernetes' own,
    sigs.k8s.io/yaml, reads 1.1), for the check that every emitted file reads back as its
    object. ``dump`` quotes what either YAML 1.1 or 1.2 would not read as a string, so
    what reads back right here reads back right in both.

    libyaml parses (through PyYAML); the values are built from its events here, with
    PyYAML's own resolver and constructors for every scalar that is not a string: what
    ``yaml.safe_load_all`` gives, in about half the time. An alias, a merge key, a tag or
    a duplicate key raises (standbyc never writes one)."""
    docs: list[Any] = []
    stack: list[Any] = []  # the open mappings and sequences, innermost last
    keys: list[Any] = []  # per open container: a mapping's pending key (_NO_KEY: none)
    loader = _LOADER(text)
    try:
        while (event := loader.get_event()) is not None:
            kind = type(event)
            if kind is _SCALAR:
                value = event.value
                if event.tag is not None or (event.implicit[0] and _plain_tag(value) != _STR):
                    value = _typed(event)  # else quoted, a block scalar or a plain string
            elif kind is _MAPPING_START or kind is _SEQUENCE_START:
                _untagged(event)
                stack.append({} if kind is _MAPPING_START else [])
                keys.append(_NO_KEY)
                continue
            elif kind is _MAPPING_END or kind is _SEQUENCE_END:
                value = stack.pop()
                keys.pop()
            elif kind is _ALIAS:
                raise ValueError(f"an alias (*{event.anchor}) where a value was expected")
            else:
                continue  # stream and document boundaries
            if not stack:
                if value is not None:
                    docs.append(value)
            elif type(top := stack[-1]) is list:
                top.append(value)
            elif (key := keys[-1]) is _NO_KEY:
                hash(value)  # a mapping or a sequence as a key is not hashable
                keys[-1] = value
            else:
                if key in top:  # Kubernetes' reader refuses it; last-one-wins would hide one
                    raise ValueError(f"a duplicate key ({key!r})")
                top[key] = value
                keys[-1] = _NO_KEY
    finally:
        loader.dispose()
    return docs


_SCALAR, _ALIAS = pyyaml.ScalarEvent, pyyaml.AliasEvent
_MAPPING_START, _MAPPING_END = pyyaml.MappingStartEvent, pyyaml.MappingEndEvent
_SEQUENCE_START, _SEQUENCE_END = pyyaml.SequenceStartEvent, pyyaml.SequenceEndEvent
_NO_KEY = object()
_STR = "tag:yaml.org,2002:str"
_CONSTRUCTOR = pyyaml.constructor.SafeConstructor()
_PLAIN_TYPES = frozenset(
    f"tag:yaml.org,2002:{t}" for t in ("null", "bool", "int", "float", "timestamp")
)


_RESOLVE: Callable[[type, str, tuple[bool, bool]], Any] = pyyaml.resolver.Resolver().resolve


@functools.lru_cache(maxsize=1 << 16)
def _plain_tag(value: str) -> str:
    """The tag PyYAML's resolver gives an untagged plain scalar (most values repeat)."""
    return str(_RESOLVE(pyyaml.ScalarNode, value, (True, False)))


def _untagged(event: Any) -> None:
    if event.tag not in (None, "!"):
        raise ValueError(f"explicit tag {event.tag}")


def _typed(event: Any) -> Any:
    """A scalar with a tag, or a plain one that does not read as a string."""
    _untagged(event)
    if not event.implicit[0]:
        return event.value  # "! value": the non-specific tag, a string
    tag = _plain_tag(event.value)
    if tag not in _PLAIN_TYPES:
        raise ValueError(f"{event.value!r} reads as {tag}")
    node = pyyaml.ScalarNode(tag, event.value, style=event.style or None)
    return _CONSTRUCTOR.yaml_constructors[tag](_CONSTRUCTOR, node)


def is_generated(text: str) -> bool:
    return text.startswith((HEADER_MARK, COMMENT_MARK))


def source_of(text: str) -> str | None:
    end = text.find("\n")
    first = text if end < 0 else text[:end]  # the header line, without copying the rest
    marker = " Source: "
    if not is_generated(first) or marker not in first:
        return None
    shown = first.split(marker, 1)[1].strip()
    if first.startswith(COMMENT_MARK):
        shown = shown.removesuffix("-->").strip()
    if shown.startswith('"'):
        try:
            decoded = json.loads(shown)
        except ValueError:
            return None
        return decoded if isinstance(decoded, str) else None
    return shown
