"""Mutated specs end in a clean error or a valid compile, never a traceback."""

from __future__ import annotations

import copy
import io
import json
import tempfile
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from compiler.api import compile_tree
from tests.conftest import REPO, field_paths, run_cli

BASE = YAML(typ="safe").load((REPO / "specs" / "inference-engine.yaml").read_text())

scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(min_value=-(2**70), max_value=2**70),
    st.floats(allow_nan=True),
    st.text(max_size=30),
    st.sampled_from(["25Gbit/s", "0Gbit/s", "5m", "0s", "14GiB", "1e400", "hot", "grpc", "50%"]),
)
values = st.recursive(
    scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
    ),
    max_leaves=6,
)


PATHS = [p for p in field_paths(BASE) if p]


def _mutate(
    spec: dict[str, Any], path: tuple[Any, ...], value: Any, delete: bool
) -> dict[str, Any]:
    spec = copy.deepcopy(spec)
    node = spec
    for key in path[:-1]:
        node = node[key]
    if delete:
        del node[path[-1]]
    else:
        node[path[-1]] = value
    return spec


def _check(text: str) -> None:
    """Through the compile API in memory: any exception is a bug; a bad spec gives
    located diagnostics, a good one a compiled tree."""
    with tempfile.TemporaryDirectory() as tmp:
        spec = Path(tmp) / "spec.yaml"
        spec.write_text(text)
        result = compile_tree([spec], Path(tmp) / "out", validate=False, write=False)
    if result.diagnostics:
        assert not result.specs
        for d in result.diagnostics:
            assert d.location.file == str(spec), d
            assert d.location.line is not None and d.location.line >= 1, d
    else:
        assert result.specs and result.files


@settings(deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(PATHS), values, st.booleans())
def test_mutated_field(path: tuple[Any, ...], value: Any, delete: bool) -> None:
    buf = io.StringIO()
    YAML(typ="safe").dump(_mutate(BASE, path, value, delete), buf)
    _check(buf.getvalue())


@settings(deadline=None)
@given(st.data())
def test_mutated_text(data: st.DataObject) -> None:
    text = (REPO / "specs" / "inference-engine.yaml").read_text()
    position = data.draw(st.integers(min_value=0, max_value=len(text)))
    insert = data.draw(st.text(max_size=5))
    cut = data.draw(st.integers(min_value=0, max_value=5))
    _check(text[:position] + insert + text[position + cut :])


def test_json_spec_is_yaml_too(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(json.dumps(BASE))
    result = run_cli("compile", str(spec), "--out", str(tmp_path / "out"), "--no-validate")
    assert result.code == 0, result.err


@settings(deadline=None)
@given(
    depth=st.integers(min_value=1, max_value=400),
    flow=st.booleans(),
    number=st.integers(min_value=0, max_value=6000),
    unit=st.sampled_from(["GiB", "Gbit/s", "m", "%", ""]),
)
def test_depth_and_size(depth: int, flow: bool, number: int, unit: str) -> None:
    """Any nesting depth and any length of number: a located diagnostic or a compile."""
    nested = ("[" * depth + "]" * depth) if flow else _block_list(depth)
    big = "9" * number + unit
    text = (
        "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\nmetadata: {name: x}\nspec:\n"
        f"  commonAnnotations: {{a: {json.dumps(big)}}}\n  model: {{size: {json.dumps(big)}}}\n"
        f"  extra: {nested}\n"
    )
    _check(text)


def _block_list(depth: int) -> str:
    lines = [""]
    for level in range(depth):
        lines.append("  " * (level + 2) + "-")
    return "\n".join(lines) + " x"
