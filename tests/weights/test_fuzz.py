"""Fuzz the delta and safetensors parsers: a clean WeightsError or a correct result.

Mutations are applied raw (stopped by the checksums) and re-sealed (checksums
recomputed, so the structural and decoder checks are what stops them).
"""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import pytest
import xxhash
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.weights.apply import apply
from compiler.weights.deltafile import PREAMBLE, DeltaReader
from compiler.weights.diff import diff
from compiler.weights.errors import WeightsError
from compiler.weights.safetensors_io import SafetensorsFile, parse_header
from compiler.weights.testing import rl_pair, transformer_specs
from tests.conftest import field_paths
from tests.weights.test_format import tiny_pair

# Example counts come from the profile (tests/conftest.py): small by default, large for
# `make fuzz`.
FUZZ = settings(deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])


class Case:
    """A base and a good delta, built once per module (hypothesis reruns the test body)."""

    def __init__(self, d: Path, old: Path, new: Path, chunk: int) -> None:
        self.dir = d
        self.old, self.new = old, new
        diff(new, d / "good.delta", old_path=old, chunk=chunk)
        self.raw = (d / "good.delta").read_bytes()
        self.hlen = PREAMBLE.unpack(self.raw[:64])[4]
        self.want = new.read_bytes()

    def run(self, data: bytes) -> None:
        delta, out = self.dir / "fuzz.delta", self.dir / "fuzz.out"
        delta.write_bytes(data)
        out.unlink(missing_ok=True)
        try:
            apply(self.old, delta, out)
        except WeightsError:
            assert not out.exists()
            return
        # Accepted: then it must be exactly the target (the digest check guarantees it).
        assert out.read_bytes() == self.want

    def reseal(self, header: bytes, payload: bytes) -> bytes:
        pre = PREAMBLE.unpack(self.raw[:64])
        return PREAMBLE.pack(pre[0], pre[1], pre[2], pre[3], len(header), len(payload),
                             xxhash.xxh3_128_digest(header),
                             xxhash.xxh3_128_digest(payload)) + header + payload  # fmt: skip


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Case]:
    d = tmp_path_factory.mktemp("fuzz")
    (d / "tiny").mkdir()
    (d / "rl").mkdir()
    old, new = tiny_pair(d / "tiny")
    rl_old, rl_new = d / "rl" / "old", d / "rl" / "new"
    # A small RL-like pair (about 100 KB) so each example is fast; 4 KiB chunks
    # give many sparse and XOR chunks to corrupt.
    rl_pair(rl_old, rl_new, transformer_specs(layers=1, hidden=64, vocab=300), lr=3e-6)
    return {
        "tiny": Case(d / "tiny", old, new, 4096),
        "rl": Case(d / "rl", rl_old, rl_new, 4096),
    }


@FUZZ
@given(data=st.data())
def test_raw_mutations(cases: dict[str, Case], data: st.DataObject) -> None:
    case = cases["tiny"]
    raw = bytearray(case.raw)
    kind = data.draw(st.sampled_from(["flip", "truncate", "extend", "splice"]))
    if kind == "flip":
        for _ in range(data.draw(st.integers(1, 4))):
            raw[data.draw(st.integers(0, len(raw) - 1))] ^= data.draw(st.integers(1, 255))
    elif kind == "truncate":
        raw = raw[: data.draw(st.integers(0, len(raw) - 1))]
    elif kind == "extend":
        raw += data.draw(st.binary(min_size=1, max_size=64))
    else:
        at = data.draw(st.integers(0, len(raw)))
        raw[at:at] = data.draw(st.binary(min_size=1, max_size=16))
    case.run(bytes(raw))


JSON = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.text(max_size=8)
    | st.sampled_from(["s", "sp", "x", "rz", "r", "c", "copy", "BF16", "a", "b"]),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner,
                                                               max_size=3),
    max_leaves=8,
)  # fmt: skip


@FUZZ
@given(data=st.data(), which=st.sampled_from(["tiny", "rl"]))
def test_resealed_header_mutations(cases: dict[str, Case], data: st.DataObject, which: str) -> None:
    case = cases[which]
    doc = json.loads(case.raw[64 : 64 + case.hlen])
    path = data.draw(st.sampled_from(field_paths(doc)[1:]))
    parent = doc
    for key in path[:-1]:
        parent = parent[key]
    if data.draw(st.booleans()) and isinstance(parent[path[-1]], int) \
            and not isinstance(parent[path[-1]], bool):  # fmt: skip
        parent[path[-1]] += data.draw(st.integers(-3, 3))  # near-miss lengths and counts
    elif data.draw(st.booleans()) and isinstance(parent, dict):
        del parent[path[-1]]
    else:
        parent[path[-1]] = data.draw(JSON)
    header = json.dumps(doc).encode()
    case.run(case.reseal(header, case.raw[64 + case.hlen :]))


@FUZZ
@given(data=st.data(), which=st.sampled_from(["tiny", "rl"]))
def test_resealed_payload_mutations(
    cases: dict[str, Case], data: st.DataObject, which: str
) -> None:
    case = cases[which]
    header = case.raw[64 : 64 + case.hlen]
    payload = bytearray(case.raw[64 + case.hlen :])
    for _ in range(data.draw(st.integers(1, 3))):
        payload[data.draw(st.integers(0, len(payload) - 1))] ^= data.draw(st.integers(1, 255))
    case.run(case.reseal(header, bytes(payload)))


@FUZZ
@given(
    raw=st.binary(max_size=300)
    | st.builds(
        lambda d: json.dumps(d).encode(), st.dictionaries(st.text(max_size=5), JSON, max_size=4)
    )
)
def test_safetensors_header_parser(raw: bytes) -> None:
    try:
        tensors, _ = parse_header(raw, 64, "fuzz")
    except WeightsError:
        return
    assert sum(t.nbytes for t in tensors) == 64


@FUZZ
@given(data=st.data())
def test_safetensors_file_mutations(cases: dict[str, Case], data: st.DataObject) -> None:
    case = cases["tiny"]
    raw = bytearray(case.old.read_bytes())
    for _ in range(data.draw(st.integers(1, 3))):
        raw[data.draw(st.integers(0, min(len(raw), 140) - 1))] ^= data.draw(st.integers(1, 255))
    path = case.dir / "fuzz.safetensors"
    path.write_bytes(bytes(raw[: data.draw(st.integers(0, len(raw)))]))
    with contextlib.suppress(WeightsError):
        SafetensorsFile(path).close()


def test_reader_rejects_reseal_of_good_delta_never(cases: dict[str, Case]) -> None:
    """Control: re-sealing an unmodified delta must still apply (the harness is sound)."""
    case = cases["rl"]
    case.run(case.reseal(case.raw[64 : 64 + case.hlen], case.raw[64 + case.hlen :]))
    DeltaReader(case.dir / "fuzz.delta").close()
