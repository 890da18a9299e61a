"""The canonical emitter: whatever it writes reads back as the same data, in YAML 1.2 and 1.1."""

from __future__ import annotations

from typing import Any

import yaml as pyyaml  # YAML 1.1 reader, as Kubernetes' and Argo CD's Go readers are
from hypothesis import given, settings
from hypothesis import strategies as st

from compiler import yamlio

TRICKY = [
    "",
    " ",
    "yes",
    "No",
    "on",
    "~",
    "null",
    "0x1F",
    "0o17",
    "012",
    "1_000",
    "1e3",
    ".5",
    "1:20",
    "2026-11-28",
    "-",
    "--",
    "---",
    "- a",
    "-a",
    "a: b",
    "a:",
    "a #b",
    "#a",
    "*a",
    "&a",
    "!a",
    "|",
    ">",
    "'q'",
    '"q"',
    "%",
    "@",
    "`",
    "{a}",
    "[a]",
    "a\nb",
    "a\n",
    "a\n\n",
    "\na",
    " a\nb",
    "a \nb",
    "tab\there",
    "é",
    "\u2028",
    "\x85",
    "a\rb",
    "$(JOB_COMPLETION_INDEX)",
    "*/30 * * * *",
]

keys = st.text(max_size=12) | st.sampled_from(TRICKY)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**63), max_value=2**63)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=40)
    | st.sampled_from(TRICKY)
)
data = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(keys, inner, max_size=4),
    max_leaves=20,
)


def _normalise(node: Any) -> Any:
    if isinstance(node, dict):
        return {str(k): _normalise(v) for k, v in node.items()}
    if isinstance(node, list):
        return [_normalise(v) for v in node]
    return node


@settings(deadline=None)
@given(st.dictionaries(keys, data, min_size=1, max_size=5))
def test_round_trip(obj: dict[str, Any]) -> None:
    text = yamlio.dump(obj)
    assert yamlio.parse_one(text) == [_normalise(obj)], text
    assert pyyaml.safe_load(text) == _normalise(obj), text


def test_multiline_strings_use_literal_blocks() -> None:
    assert yamlio.dump({"expr": "a\nb\n"}) == "expr: |\n  a\n  b\n"
    assert yamlio.dump({"expr": "a\nb"}) == "expr: |-\n  a\n  b\n"


def test_yaml11_specials_are_quoted() -> None:
    assert yamlio.dump({"a": "yes", "b": "1200", "c": "on"}) == 'a: "yes"\nb: "1200"\nc: "on"\n'


def test_kubectl_key_order() -> None:
    obj = {"spec": {}, "metadata": {"labels": {}, "name": "x"}, "kind": "K", "apiVersion": "v1"}
    assert yamlio.dump(obj) == (
        "apiVersion: v1\nkind: K\nmetadata:\n  name: x\n  labels: {}\nspec: {}\n"
    )
