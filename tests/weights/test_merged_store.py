"""A store with merged deltas: what a lagging standby fetches, what the index holds, and
anchors by drift."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from compiler.weights.apply import apply
from compiler.weights.diff import diff
from compiler.weights.sync.errors import StoreError
from compiler.weights.sync.index import Index, parse_index, read_index
from compiler.weights.sync.merge_policy import MergePolicy
from compiler.weights.sync.publish import PublishOptions, publish
from compiler.weights.sync.route import plan_route
from compiler.weights.sync.stores.directory import DirectoryReader
from compiler.weights.testing import to_bf16, transformer_specs, write_safetensors
from tests.conftest import field_paths
from tests.weights.conftest import sha256
from tests.weights.test_fuzz import JSON
from tests.weights.test_merge import _save, impossible_chain

CHUNK = 4096
SPECS = transformer_specs(layers=1, hidden=64, vocab=256)
GENERATIONS = 45


def _chain(root: Path, n: int, lr: float, seed: int = 0) -> list[Path]:
    """``n`` bf16 checkpoints, each a few Adam-like steps on fp32 masters after the last."""
    rng = np.random.default_rng(seed)
    master = {
        name: (0.02 * rng.standard_normal(shape)).astype(np.float32) for name, _, shape in SPECS
    }
    out = []
    for g in range(1, n + 1):
        for w in master.values():
            # Adam moves every weight by about lr; most bf16 values flip only now and then.
            step = np.float32(lr) * np.sign(rng.standard_normal(w.shape)).astype(np.float32)
            np.subtract(w, step, out=w)
        path = root / f"g{g}" / "model.safetensors"
        path.parent.mkdir(parents=True)

        def bf16(name: str) -> npt.NDArray[np.generic]:
            return to_bf16(master[name])

        write_safetensors(path, SPECS, bf16, {"format": "pt", "step": str(g)})
        out.append(path)
    return out


@pytest.fixture(scope="module")
def chain(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], Path]:
    root = tmp_path_factory.mktemp("chain")
    gens = _chain(root / "models", GENERATIONS, lr=1e-5)
    store = root / "store"
    for g, path in enumerate(gens, start=1):
        publish(path.parent, store, g, PublishOptions(chunk=CHUNK))
    return gens, store


def _digest(store: Path, g: int) -> str:
    index = read_index(DirectoryReader(store))
    assert index is not None
    return index.generations[g].weights.digest


@pytest.mark.parametrize("behind", [1, 7, 40])
def test_a_lagging_standby_fetches_about_the_direct_delta(
    chain: tuple[list[Path], Path], behind: int, tmp_path: Path
) -> None:
    gens, store = chain
    index = read_index(DirectoryReader(store))
    assert index is not None
    latest = index.latest
    start = latest - behind
    route = plan_route(index, index.generations[start].weights.digest, latest)
    direct = tmp_path / "direct.delta"
    diff(gens[latest - 1], direct, old_path=gens[start - 1], chunk=CHUNK)
    assert route.nbytes <= 1.25 * direct.stat().st_size, route.reason
    by_anchor = plan_route(index, None, latest)
    assert by_anchor.anchor is not None
    assert route.nbytes <= by_anchor.nbytes
    chain_only = plan_route(index, index.generations[start].weights.digest, latest, merged=False)
    assert route.nbytes <= chain_only.nbytes
    if behind >= 7:  # where the chain is dearer, a merged delta is what it takes
        assert route.nbytes < chain_only.nbytes
        assert any(s.merged for s in route.deltas), route.describe()
    # The deltas of the route rebuild the target bit for bit from the standby's weights.
    base = gens[start - 1]
    for i, step in enumerate(route.deltas):
        out = tmp_path / f"step{i}" / "model.safetensors"
        out.parent.mkdir()
        stats = apply(base, store / step.delta.file.path, out)
        assert stats.target_digest == step.weights.digest
        base = out
    assert sha256(base) == sha256(gens[latest - 1])


def test_only_the_latest_lists_merged_deltas_and_the_store_holds_only_those(
    chain: tuple[list[Path], Path],
) -> None:
    _, store = chain
    index = read_index(DirectoryReader(store))
    assert index is not None
    latest = index.generations[index.latest]
    assert latest.merged
    assert all(not g.merged for n, g in index.generations.items() if n != index.latest)
    on_disk = {p.relative_to(store).as_posix() for p in (store / "deltas").iterdir()}
    listed = {
        f.path for g in index.generations.values() for f in g.stored() if f.path[:7] == "deltas/"
    }
    assert on_disk == listed
    assert {m.base for m in latest.merged} <= set(range(latest.number - 64, latest.number - 1))


def _index_doc(store: Path) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((store / "index.json").read_bytes())
    return doc


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda m, g: m.update({"from": g}), "is not before"),
        (lambda m, g: m.update({"path": "deltas/1-2.delta"}), "path: must be deltas/"),
        (lambda m, g: m.update({"size": -1}), "size: expected an integer"),
        (lambda m, g: m.update({"target_digest": "0" * 32}), "differs from the weights' digest"),
        (lambda m, g: m.update({"base_digest": "0" * 32}), "is for another base"),
        (lambda m, g: m.update({"from": g - 1, "path": f"deltas/{g - 1}-{g}.delta"}), "second"),
    ],
)
def test_a_malformed_merged_entry_is_refused(
    chain: tuple[list[Path], Path], change: Any, message: str
) -> None:
    _, store = chain
    doc = _index_doc(store)
    latest = doc["generations"][-1]
    change(latest["merged"][0], latest["generation"])
    with pytest.raises(StoreError, match=message):
        parse_index(json.dumps(doc).encode(), "index.json")


def test_an_index_without_merged_deltas_reads_as_before(chain: tuple[list[Path], Path]) -> None:
    _, store = chain
    doc = _index_doc(store)
    del doc["generations"][-1]["merged"]
    index = parse_index(json.dumps(doc).encode(), "index.json")
    assert not index.generations[index.latest].merged
    assert b'"merged"' not in index.dumps()


def _anchors(index: Index) -> list[int]:
    return sorted(g for g, gen in index.generations.items() if gen.anchor)


def test_anchors_by_drift(tmp_path: Path) -> None:
    small = _chain(tmp_path / "small", 12, lr=1e-6, seed=1)
    big = _chain(tmp_path / "big", 6, lr=3e-2, seed=2)  # nearly every weight flips each step
    off = MergePolicy("off")
    store = tmp_path / "store"
    chain = 0
    for g, path in enumerate(small, start=1):
        stats = publish(
            path.parent, store, g, PublishOptions(chunk=CHUNK, merge=off, anchor_drift=1.0)
        )
        chain += stats.delta_bytes
    assert 0 < chain < stats.checkpoint_bytes
    index = read_index(DirectoryReader(store))
    assert index is not None
    assert _anchors(index) == [1, 12]  # small steps: no anchor between the ends
    for g, path in enumerate(big, start=13):
        stats = publish(
            path.parent, store, g, PublishOptions(chunk=CHUNK, merge=off, anchor_drift=1.0)
        )
        assert stats.delta_bytes > 0.5 * stats.checkpoint_bytes
    index = read_index(DirectoryReader(store))
    assert index is not None
    anchors = _anchors(index)
    # Each large step is over half the model: anchors at most two generations apart.
    late = [g for g in anchors if g >= 12]
    assert late[0] <= 14 and late[-1] == 18
    assert all(b - a <= 2 for a, b in itertools.pairwise(late))
    assert [g for g in anchors if g < 12] == [1]


def test_the_count_cap_and_drift_off(tmp_path: Path) -> None:
    small = _chain(tmp_path / "small", 9, lr=3e-6, seed=3)
    off = MergePolicy("off")
    capped, plain = tmp_path / "capped", tmp_path / "plain"
    for g, path in enumerate(small, start=1):
        publish(path.parent, capped, g, PublishOptions(chunk=CHUNK, merge=off, anchor_every=3))
        publish(
            path.parent,
            plain,
            g,
            PublishOptions(chunk=CHUNK, merge=off, anchor_every=4, anchor_drift=0),
        )
    a, b = read_index(DirectoryReader(capped)), read_index(DirectoryReader(plain))
    assert a is not None and b is not None
    assert _anchors(a) == [1, 4, 7, 9]  # three generations after the last anchor
    assert _anchors(b) == [1, 4, 8, 9]  # every 4th, as before drift


def test_a_merge_that_needs_the_base_leaves_the_chain(tmp_path: Path) -> None:
    gens = impossible_chain(np.random.default_rng(6))
    store = tmp_path / "store"
    paths = []
    for g, ts in enumerate(gens, start=1):
        (tmp_path / f"g{g}").mkdir()
        paths.append(_save(ts, tmp_path / f"g{g}" / "model", 1))
        stats = publish(
            paths[-1].parent, store, g, PublishOptions(chunk=CHUNK, merge=MergePolicy("all"))
        )
    assert stats.merged == [] and stats.merges == 0
    assert stats.merge_stopped.startswith("generation 1: 'w' chunk 0: the merged change")
    index = read_index(DirectoryReader(store))
    assert index is not None
    route = plan_route(index, index.generations[1].weights.digest, 3)
    assert "next best chain of 2 delta(s) 1 -> 2 -> 3:" in route.reason, route.reason
    assert not list(store.rglob("*standbyc-tmp*"))


def test_a_damaged_delta_in_the_store_ends_the_merges_not_the_publish(tmp_path: Path) -> None:
    gens = _chain(tmp_path / "models", 5, lr=1e-5, seed=4)
    store = tmp_path / "store"
    for g, path in enumerate(gens[:4], start=1):
        publish(path.parent, store, g, PublishOptions(chunk=CHUNK, merge=MergePolicy("all")))
    damaged = store / "deltas/2-3.delta"
    data = bytearray(damaged.read_bytes())
    data[-10] ^= 0xFF
    damaged.write_bytes(bytes(data))
    stats = publish(gens[4].parent, store, 5, PublishOptions(chunk=CHUNK, merge=MergePolicy("all")))
    assert [f for f, _ in stats.merged] == [3]  # 3 -> 5; 2 -> 5 needs the damaged 2 -> 3
    assert stats.merge_stopped.startswith("generation 2: ")
    assert "deltas/2-3.delta: payload checksum mismatch" in stats.merge_stopped
    assert not list(store.rglob("*standbyc-tmp*"))


@settings(deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_a_mutated_merged_entry_is_refused_or_routed(
    chain: tuple[list[Path], Path], data: st.DataObject
) -> None:
    _, store = chain
    doc = _index_doc(store)
    latest = doc["generations"][-1]
    path = data.draw(st.sampled_from(field_paths(latest["merged"])[1:]))
    parent = latest["merged"]
    for key in path[:-1]:
        parent = parent[key]
    if isinstance(parent, dict) and data.draw(st.booleans()):
        del parent[path[-1]]
    else:
        parent[path[-1]] = data.draw(JSON)
    try:
        index = parse_index(json.dumps(doc).encode(), "index.json")
    except StoreError:
        return
    for start in (1, 20, index.latest - 1):
        route = plan_route(index, index.generations[start].weights.digest, index.latest)
        assert all(s.delta.base in index.generations for s in route.deltas)
        assert route.nbytes >= 0
