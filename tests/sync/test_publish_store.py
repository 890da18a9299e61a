"""A store directory that is not a whole store is refused before anything is written: one
that lost its index (it would silently start a new history), one that is only an index
(nothing to make the delta from)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from tests.sync.conftest import publish, run_standbyc, tree_bytes


def _publish(model: Path, store: Path, generation: int) -> tuple[int, dict[str, object]]:
    proc = run_standbyc("weights", "publish", str(model), "--to", str(store), "--generation",
                        str(generation), "--format", "json")  # fmt: skip
    return proc.returncode, json.loads(proc.stdout)


def test_a_store_that_lost_its_index_is_refused(
    generations: dict[int, Path], tmp_path: Path
) -> None:
    store = tmp_path / "store"
    assert publish(generations[1], store, 41)["new_store"] is True
    (store / "index.json").unlink()
    before = tree_bytes(store)
    code, doc = _publish(generations[2], store, 42)
    assert code == 2, doc
    assert doc["error"] == (
        f"{store}: no index.json, but it holds anchors, manifests: a store that lost its index, "
        "or not an empty place; publish into an empty one (or restore index.json)"
    )
    assert tree_bytes(store) == before


def test_an_index_without_the_latest_anchor_or_manifest_is_refused_and_nothing_is_left(
    generations: dict[int, Path], tmp_path: Path
) -> None:
    store = tmp_path / "store"
    publish(generations[1], store, 41)
    for top in ("anchors", "manifests"):
        shutil.rmtree(store / top)
    before = tree_bytes(store)
    code, doc = _publish(generations[2], store, 42)
    assert code == 2, doc
    assert doc["error"] == (
        f"{store}: neither the anchor nor the manifest of generation 41, the latest, is there: "
        "the store is incomplete"
    )
    assert tree_bytes(store) == before  # no partial files


def test_an_index_with_the_manifest_only_gives_a_delta_against_it(
    generations: dict[int, Path], tmp_path: Path
) -> None:
    store = tmp_path / "store"
    publish(generations[1], store, 41)
    shutil.rmtree(store / "anchors")
    doc = publish(generations[2], store, 42)
    assert (doc["delta_from"], doc["delta_base"], doc["new_store"]) == (41, "manifest", False)
