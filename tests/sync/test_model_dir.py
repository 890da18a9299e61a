"""The model directory is the unit: a Hugging Face directory as a trainer saves it
(weights, config, tokenizer, chat template) is published, synced through nginx with the
compiled Job's command, and loaded with transformers, bit for bit the new generation;
what cannot be a model directory is refused before anything is written."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from tests.conftest import import_torch
from tests.sync import hfmodel
from tests.sync.conftest import (
    Nginx,
    job_command,
    publish,
    run_standbyc,
    tree_bytes,
    with_arg,
)

TARGET = "hot/llama-7b"  # the hot Job's --target under the weights mount (model.path's basename)


@pytest.fixture(scope="module", params=["one-file", "sharded"])
def hf(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    shard = "60KB" if request.param == "sharded" else None
    return hfmodel.build(tmp_path_factory.mktemp(f"hf-{request.param}"), shard=shard)


def _sync(cmd: list[str]) -> tuple[int, dict[str, object], str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    doc = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, doc, proc.stderr + proc.stdout


def test_a_hugging_face_directory_arrives_whole_and_loads(
    hf: dict[int, Path], nginx: Nginx, compiled: Path, tmp_path: Path
) -> None:
    torch = import_torch()
    names = sorted(tree_bytes(hf[2]))
    assert {"config.json", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json"} <= set(names)  # fmt: skip
    publish(hf[1], nginx.root, 41)
    second = publish(hf[2], nginx.root, 42)
    # Only generation_config.json changed besides the weights: stored anew, with a patch.
    assert second["files_new"] == ["generation_config.json"]
    assert second["files_patched"] == ["generation_config.json"]
    weights = tmp_path / "weights"
    cmd = job_command(compiled, "hot", source=nginx.url, weights=weights)
    code, _, err = _sync(with_arg(cmd, "--generation", "41"))
    assert code == 0, err
    assert tree_bytes(weights / TARGET) == tree_bytes(hf[1])

    nginx.clear_log()
    code, doc, err = _sync(cmd)  # the compiled Job's command, as it runs
    assert code == 0, err
    # Every file, with its own name, bit for bit; nothing else.
    assert tree_bytes(weights / TARGET) == tree_bytes(hf[2])
    fetched = [e["uri"] for e in nginx.log()]
    assert fetched[0] == "/index.json" and fetched[1] == "/deltas/41-42.delta", fetched
    assert len(fetched) == 3 and fetched[2].startswith("/patches/"), fetched  # no unchanged file
    plain = [n for n in names if not n.endswith((".safetensors", ".safetensors.index.json"))]
    assert doc["files"] == {
        "kept": [n for n in plain if n != "generation_config.json"],
        "patched": ["generation_config.json"],
        "whole": [],
    }

    got = hfmodel.logits(weights / TARGET)
    assert torch.equal(got, hfmodel.logits(hf[2]))
    assert not torch.equal(got, hfmodel.logits(hf[1]))  # the step changed what it computes
    assert hfmodel.chat_prompt(weights / TARGET) == hfmodel.chat_prompt(hf[2])


def test_files_the_store_does_not_hold_are_named_when_they_go(
    hf: dict[int, Path], nginx: Nginx, compiled: Path, tmp_path: Path
) -> None:
    publish(hf[1], nginx.root, 41)
    publish(hf[2], nginx.root, 42)
    weights = tmp_path / "weights"
    cmd = job_command(compiled, "hot", source=nginx.url, weights=weights)
    assert _sync(with_arg(cmd, "--generation", "41"))[0] == 0
    (weights / TARGET / "notes.txt").write_text("mine")
    code, doc, err = _sync(cmd)
    assert code == 0, err
    assert doc["removed"] == ["notes.txt"]
    assert tree_bytes(weights / TARGET) == tree_bytes(hf[2])
    text = run_standbyc(*with_arg(cmd, "--format", "text")[1:])
    assert text.returncode == 0  # already current now: nothing more to say about it


def _publish_refused(src: Path, store: Path, *extra: str) -> str:
    before = tree_bytes(store) if store.exists() else {}
    proc = run_standbyc("weights", "publish", str(src), "--to", str(store),
                        "--generation", "1", *extra)  # fmt: skip
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert (tree_bytes(store) if store.exists() else {}) == before  # nothing written
    return proc.stderr


def _model_copy(hf: dict[int, Path], dest: Path) -> Path:
    dest.mkdir()
    for name, data in tree_bytes(hf[1]).items():
        (dest / name).parent.mkdir(parents=True, exist_ok=True)
        (dest / name).write_bytes(data)
    return dest


def test_what_cannot_be_a_model_directory_is_refused(hf: dict[int, Path], tmp_path: Path) -> None:
    store = tmp_path / "store"
    outside = tmp_path / "outside.json"
    outside.write_text("{}")

    model = _model_copy(hf, tmp_path / "link-out")
    (model / "extra.json").symlink_to(outside)
    err = _publish_refused(model, store)
    assert "extra.json: a symlink to" in err and "outside the model directory" in err

    model = _model_copy(hf, tmp_path / "fifo")
    os.mkfifo(model / "pipe")
    assert "pipe: a FIFO cannot be part of a model directory" in _publish_refused(model, store)

    model = _model_copy(hf, tmp_path / "device")
    os.mknod(model / "dev", stat.S_IFCHR | 0o600, os.makedev(1, 3))  # like /dev/null
    err = _publish_refused(model, store)
    assert "dev: a character device cannot be part of a model directory" in err

    model = _model_copy(hf, tmp_path / "too-large")
    (model / "blob.bin").write_bytes(b"x" * 5000)
    err = _publish_refused(model, store, "--max-file-size", "4KiB")
    assert "blob.bin: 5000 bytes, over the cap of 4096" in err

    model = _model_copy(hf, tmp_path / "which-weights")
    for p in model.glob("*.safetensors*"):
        p.unlink()
    for name in ("a.safetensors", "b.safetensors"):
        (model / name).write_bytes((hf[1] / "config.json").read_bytes())
    assert "2 .safetensors files and neither" in _publish_refused(model, store)

    # A symlink inside the directory to a file inside it is read as that file.
    model = _model_copy(hf, tmp_path / "link-in")
    (model / "config-copy.json").symlink_to("config.json")
    proc = run_standbyc("weights", "publish", str(model), "--to", str(store),
                        "--generation", "1")  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def test_an_index_naming_a_path_out_of_the_target_is_refused(
    hf: dict[int, Path], nginx: Nginx, compiled: Path, tmp_path: Path
) -> None:
    publish(hf[1], nginx.root, 42)
    index_path = nginx.root / "index.json"
    index = json.loads(index_path.read_text())
    index["generations"][0]["files"][0]["name"] = "../../escape.json"
    index_path.write_text(json.dumps(index))
    weights = tmp_path / "weights"
    code, doc, err = _sync(job_command(compiled, "hot", source=nginx.url, weights=weights))
    assert code == 2, err
    assert "'../../escape.json' cannot be a file in a model directory" in str(doc["error"])
    assert not (weights / TARGET).exists()
    assert not list(tmp_path.rglob("escape.json"))
