"""A dashboard checked against the schema the Grafana Foundation SDK carries.

The SDK's models are Grafana's dashboard schema (11.6) as typed classes. A dashboard is in
that schema when:

- decoding it with the SDK (``Dashboard.from_json``, with the panel and query plugins
  registered, as Grafana decodes a panel by its type and a query by its datasource) and
  encoding it again gives back exactly the same JSON: a key the schema does not know is
  dropped, a required key that is missing is added, and either shows as a difference;
- every value the SDK decoded has the type its model declares (strings, integers, numbers,
  booleans, lists, maps, and an enum's values only).
"""

from __future__ import annotations

import enum
import json
import types
import typing
from typing import Any

from grafana_foundation_sdk.cog.encoder import JSONEncoder
from grafana_foundation_sdk.cog.plugins import register_default_plugins
from grafana_foundation_sdk.models.dashboard import Dashboard


def problems(doc: dict[str, Any]) -> list[str]:
    """What in ``doc`` the SDK's dashboard schema does not hold (empty: valid)."""
    register_default_plugins()
    model = Dashboard.from_json(doc)
    back = json.loads(JSONEncoder(sort_keys=True).encode(model))
    return _diff(doc, back, "$") + _types(model, "$")


def _diff(a: Any, b: Any, path: str) -> list[str]:
    if isinstance(a, dict) and isinstance(b, dict):
        out = [f"{path}.{k}: not in the schema" for k in sorted(set(a) - set(b))]
        out += [f"{path}.{k}: required, missing" for k in sorted(set(b) - set(a))]
        for k in sorted(set(a) & set(b)):
            out += _diff(a[k], b[k], f"{path}.{k}")
        return out
    if isinstance(a, list) and isinstance(b, list) and len(a) == len(b):
        return [p for i, (x, y) in enumerate(zip(a, b, strict=True))
                for p in _diff(x, y, f"{path}[{i}]")]  # fmt: skip
    if a != b or type(a) is not type(b):
        return [f"{path}: {a!r} reads back as {b!r}"]
    return []


def _is_model(value: Any) -> bool:
    return callable(getattr(value, "to_json", None)) and hasattr(type(value), "__annotations__")


def _types(model: Any, path: str) -> list[str]:
    """Every attribute of a decoded model against the type its class declares."""
    hints = typing.get_type_hints(type(model))
    out: list[str] = []
    for attr, hint in hints.items():
        if attr.startswith("_"):
            continue
        out += _check(getattr(model, attr, None), hint, f"{path}.{attr}")
    return out


def _container(value: Any, origin: Any, args: tuple[Any, ...], path: str) -> list[str]:
    if not isinstance(value, origin):
        return [f"{path}: {value!r} is not a {'list' if origin is list else 'map'}"]
    if origin is list:
        return [p for i, v in enumerate(value) for p in _check(v, args[0], f"{path}[{i}]")]
    return [p for k, v in value.items() for p in _check(v, args[1], f"{path}.{k}")]


def _check(value: Any, hint: Any, path: str) -> list[str]:  # noqa: PLR0911 - one per form
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any or hint is object:
        return _types(value, path) if _is_model(value) else []
    if origin in (typing.Union, types.UnionType):
        tried = [_check(value, a, path) for a in args]
        if not all(tried):
            return []
        # The member the value is an instance of, whose problems lie deeper, says most.
        return min(tried, key=lambda r: (any(p.startswith(path + ":") for p in r), len(r)))
    if hint is type(None):
        return [] if value is None else [f"{path}: {value!r} is not null"]
    if origin is typing.Literal:
        return [] if value in args else [f"{path}: {value!r} is not one of {args}"]
    if origin in (list, dict):
        return _container(value, origin, args, path)
    if isinstance(hint, type) and issubclass(hint, enum.Enum):
        return [] if value in {e.value for e in hint} else [f"{path}: {value!r} not in {hint}"]
    if hint in (int, float, str, bool):
        ok = isinstance(value, hint) and not (hint is not bool and isinstance(value, bool))
        ok = ok or (hint is float and isinstance(value, int) and not isinstance(value, bool))
        return [] if ok else [f"{path}: {value!r} is not a {hint.__name__}"]
    if isinstance(hint, type):
        if not isinstance(value, hint):
            return [f"{path}: {value!r} is not a {hint.__name__}"]
        return _types(value, path) if _is_model(value) else []
    return []
