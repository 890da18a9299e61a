"""Canonical YAML out, safe YAML in: the only place standbyc formats YAML.

Output is deterministic: keys keep the order the object was built in, except
that ``apiVersion, kind, metadata`` always lead (as kubectl users expect).
Strings that a YAML 1.1 reader (Kubernetes' sigs.k8s.io/yaml, Argo CD) would
turn into booleans, numbers or null are quoted, and multi-line strings use
literal blocks so PromQL and embedded files stay readable in review.
"""

from __future__ import annotations

import io
import re
from typing import Any

from ruamel.yaml import YAML
from ruamel.yaml.representer import RoundTripRepresenter
from ruamel.yaml.scalarstring import DoubleQuotedScalarString, LiteralScalarString

HEADER_MARK = "# standbyc: generated — do not edit."
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


def _ordered(obj: Any, top: bool = True) -> Any:
    if isinstance(obj, dict):
        keys = list(obj)
        if top:
            lead = [k for k in LEADING_KEYS if k in obj]
            keys = lead + [k for k in keys if k not in lead]
        out: dict[str, Any] = {}
        for key in keys:
            value = obj[key]
            if key == "metadata" and top and isinstance(value, dict):
                lead_meta = [k for k in METADATA_KEYS if k in value]
                value = {k: value[k] for k in lead_meta + [k for k in value if k not in lead_meta]}
            out[key] = _ordered(value, top=False)
        return out
    if isinstance(obj, list):
        return [_ordered(v, top=False) for v in obj]
    if isinstance(obj, str):
        if "\n" in obj and not any(line != line.rstrip() for line in obj.splitlines()):
            return LiteralScalarString(obj)
        if _YAML11_SPECIAL.match(obj) or obj == "":
            return DoubleQuotedScalarString(obj)
    return obj


class _Representer(RoundTripRepresenter):
    pass


_Representer.add_representer(dict, RoundTripRepresenter.represent_dict)


def _dumper() -> YAML:
    yaml = YAML(typ="rt")
    yaml.Representer = _Representer
    yaml.width = 4096  # never fold long PromQL or JSON lines
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.explicit_start = False
    return yaml


def dump(obj: Any) -> str:
    buf = io.StringIO()
    _dumper().dump(_ordered(obj), buf)
    return buf.getvalue()


def header(source: str) -> str:
    return f"{HEADER_MARK} Source: {source}\n"


def document(obj: Any, source: str) -> str:
    return header(source) + dump(obj)


def parse_one(text: str) -> list[Any]:
    """All documents in ``text`` with a safe loader (no tags, no Python objects)."""
    yaml = YAML(typ="safe")  # libyaml parser when ruamel.yaml.clib is present
    return [d for d in yaml.load_all(text) if d is not None]


def is_generated(text: str) -> bool:
    return text.startswith(HEADER_MARK)


def source_of(text: str) -> str | None:
    first = text.split("\n", 1)[0]
    marker = " Source: "
    if not first.startswith(HEADER_MARK) or marker not in first:
        return None
    return first.split(marker, 1)[1].strip()
