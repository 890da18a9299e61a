"""The canonical emitter: whatever it writes reads back as the same data, in YAML 1.2 and 1.1."""

from __future__ import annotations

from typing import Any

import pytest
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


def _libyaml(text: str) -> list[Any]:
    return [d for d in pyyaml.load_all(text, Loader=pyyaml.CSafeLoader) if d is not None]


@settings(deadline=None)
@given(st.dictionaries(keys, data, min_size=1, max_size=5))
def test_read_back_is_what_a_yaml_11_reader_reads(obj: dict[str, Any]) -> None:
    text = yamlio.document(obj, "specs/x.yaml")
    assert yamlio.read_back(text) == _libyaml(text) == [_normalise(obj)], text


# YAML that standbyc never writes, read as PyYAML's safe loader reads it.
READ_LIKE_PYYAML = [
    "a: yes\nb: 0x1F\nc: 1_000\nd: 1:20\ne: .5\nf: ~\ng: 2026-11-28\nh: 012\n",
    "- 'q'\n- \"r\"\n- |\n  s\n- >\n  t\n  u\n- ! 7\n- plain text\n",
    "a: {b: [1, two, {c: d}]}\n? [x]\n",  # a sequence as a key: PyYAML refuses it too
    "--- 1\n--- null\n--- [a]\n...\n",
    "&anchor a: b\nc: &v 1\n",
    "{}\n",
    "",
]
REFUSED = [
    "a: &x [1]\nb: *x\n",  # an alias
    "base: &b {x: 1}\nderived:\n  <<: *b\n",  # a merge key
    "a: !!str 1\n",  # an explicit tag, even a plain one
    "a: !custom x\n",
    "a: =\n",  # the YAML 1.1 value key
    "a: [1\n",  # not YAML at all
    "a: 1\nb: 2\na: 3\n",  # a duplicate key (a template that wrote one would lose a value)
    "spec:\n  x: 1\n  x: 1\n",  # even with the same value
]


@pytest.mark.parametrize("text", READ_LIKE_PYYAML)
def test_read_back_reads_yaml_as_pyyaml_does(text: str) -> None:
    try:
        expected = _libyaml(text)
    except pyyaml.YAMLError:
        with pytest.raises((pyyaml.YAMLError, TypeError)):
            yamlio.read_back(text)
    else:
        assert yamlio.read_back(text) == expected


@pytest.mark.parametrize("text", REFUSED)
def test_read_back_refuses_what_standbyc_never_writes(text: str) -> None:
    with pytest.raises((ValueError, pyyaml.YAMLError)):
        yamlio.read_back(text)
