"""The file steps a sync takes in a directory others may write: no link is written
through, no FIFO is waited on, no file is read beyond its cap; and one cap on the files of
a generation, the same for a store's index and for a standby's own directory."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from compiler.fsutil import open_append, read_regular, write_replacing
from compiler.weights.sync.errors import StoreError
from compiler.weights.sync.index import dir_digest, parse_index
from compiler.weights.sync.modeldir import MAX_FILES, ModelDirError, scan
from compiler.weights.sync.standby import read_state


def _victim(tmp_path: Path) -> Path:
    victim = tmp_path / "victim"
    victim.write_text("theirs")
    return victim


def test_a_planted_tmp_link_is_replaced_not_written_through(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    (tmp_path / "state.json.tmp").symlink_to(victim)
    write_replacing(tmp_path / "state.json", b"ours")
    assert victim.read_text() == "theirs"
    assert (tmp_path / "state.json").read_bytes() == b"ours"
    assert not (tmp_path / "state.json.tmp").exists()


def test_a_planted_final_link_is_replaced_not_written_through(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    (tmp_path / "state.json").symlink_to(victim)
    write_replacing(tmp_path / "state.json", b"ours")
    assert victim.read_text() == "theirs"
    assert not (tmp_path / "state.json").is_symlink()


def test_append_refuses_a_link(tmp_path: Path) -> None:
    victim = _victim(tmp_path)
    (tmp_path / "x.part").symlink_to(victim)
    with pytest.raises(OSError, match="Too many levels of symbolic links"):
        os.close(open_append(tmp_path / "x.part"))
    assert victim.read_text() == "theirs"


def test_read_regular_neither_waits_nor_follows_nor_reads_past_its_cap(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    started = time.monotonic()
    assert read_regular(fifo, 1 << 20) is None
    assert time.monotonic() - started < 1
    link = tmp_path / "link"
    link.symlink_to(_victim(tmp_path))
    assert read_regular(link, 1 << 20) is None
    big = tmp_path / "big"
    with big.open("wb") as f:
        f.truncate(2 << 20)
    assert read_regular(big, 1 << 20) is None
    assert read_regular(tmp_path, 1 << 20) is None
    assert read_regular(tmp_path / "victim", 6) == b"theirs"


@pytest.mark.parametrize(
    ("field", "value"),
    [("generation", 10**400), ("generation", -7), ("generation", True), ("generation", 0),
     ("signature", [["a", 1.5, 2, 3, 4]]), ("files", {"a": 7}), ("weights", {"files": "x"})],
)  # fmt: skip
def test_a_mistyped_state_is_none(tmp_path: Path, field: str, value: object) -> None:
    doc = {"format": "standbyc-sync-state", "version": 2, "generation": 4, "digest": None,
           "weights": {"digest": None, "files": []}, "files": {}, "signature": [],
           "served": {}}  # fmt: skip
    path = tmp_path / "state.json"
    path.write_text(json.dumps(doc))
    assert read_state(path) == doc
    path.write_text(json.dumps(doc | {field: value}))
    assert read_state(path) is None


def _index(files: int) -> bytes:
    """An index of one generation listing ``files`` files beside its weights."""
    sha = "0" * 64
    listed = [{"name": f"f/{i:05d}", "size": 0, "sha256": sha} for i in range(files)]
    weights = {"digest": "0" * 32, "files": ["model.safetensors"], "size": 0}
    gen = {
        "generation": 1, "size": 0, "weights": weights, "files": listed,
        "digest": dir_digest("0" * 32, ["model.safetensors"], [(f["name"], 0, sha)
                                                              for f in listed]),
        "manifest": {"path": "manifests/1.json", "size": 0, "sha256": sha},
        "delta": None, "anchor": [{"path": "anchors/1/model.safetensors", "size": 0,
                                   "sha256": sha, "name": "model.safetensors"}],
    }  # fmt: skip
    doc = {"format": "standbyc-store", "version": 2, "chunk_size": 1 << 20, "latest": 1,
           "generations": [gen]}  # fmt: skip
    return json.dumps(doc).encode()


def test_one_cap_for_an_index_and_a_model_directory(tmp_path: Path) -> None:
    """What a store may list is what a standby can read back as its own directory."""
    parse_index(_index(MAX_FILES - 1), "at the cap")  # with the weights: MAX_FILES files
    with pytest.raises(StoreError, match=f"{MAX_FILES + 1} files; a model directory holds"):
        parse_index(_index(MAX_FILES), "past the cap")
    root = tmp_path / "model"
    (root / "f").mkdir(parents=True)
    (root / "model.safetensors").write_bytes(b"")
    for i in range(MAX_FILES - 1):
        (root / "f" / f"{i:05d}").write_bytes(b"")
    assert len(scan(root).files) == MAX_FILES - 1
    (root / "f" / "one-more").write_bytes(b"")
    with pytest.raises(ModelDirError, match=f"more than {MAX_FILES} files"):
        scan(root)
