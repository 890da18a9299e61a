"""Signed generations in each way they are made and verified: a certificate of a small PKI
made here (the identity checked), a signature the training pipeline made with the
model-signing CLI itself, a publish to an s3:// store (versitygw) read back through a
merged delta, the verification remembered while the directory is unchanged, the
refusal pushed again by the weight-report command, and what publish refuses."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from compiler.weights.sync.publish import publish as store_publish
from compiler.weights.sync.signed import MARKER, marker_bytes
from tests.servers import Pushgateway
from tests.sync.conftest import MODEL, Nginx, publish, run_standbyc, sha256, tree_bytes
from tests.sync.minisigstore import Sigstore
from tests.sync.s3bucket import BUCKET, S3
from tests.sync.signing import LABELS, Keys, Listener, key_trust, pushed, reports, sync


def cert_trust(keys: Keys, identity: str = "release@example.com") -> list[str]:
    return ["--verify", "certificate", "--verify-trust", str(keys.pki.chain),
            "--verify-identity", identity]  # fmt: skip


def _cert_signed(src: Path, dest: Path, generation: int, leaf: tuple[Path, Path]) -> Path:
    """``src`` signed as ``generation`` by the certificate ``leaf`` (key, certificate) and
    the intermediate above it."""
    shutil.copytree(src, dest)
    key, cert = leaf
    chain = cert.parent / "intermediate.pem"
    doc = publish(dest, dest.parent / f"scratch-{dest.name}", generation, "--sign-key", str(key),
                  "--sign-cert", str(cert), "--sign-chain", str(chain),
                  "--model", MODEL)  # fmt: skip
    assert doc["signature"]["how"] == "signed", doc
    return dest


def test_a_certificate_chain_and_its_identity(
    sharded: dict[int, Path], keys: Keys, nginx: Nginx, engine: Listener, tmp_path: Path
) -> None:
    release = keys.pki.leaf("release@example.com")
    intruder = keys.pki.leaf("intruder@example.com")  # the same PKI, another identity
    rogue = keys.rogue.leaf("release@example.com")  # the right name, another root
    store_publish(_cert_signed(sharded[1], tmp_path / "g1", 1, release), nginx.root, 1)
    target = tmp_path / "weights/hot/llama"
    code, doc, err = sync(target, nginx.url, 1, *cert_trust(keys))
    assert code == 0, err
    assert doc["verified"]["trust"].startswith("a certificate for release@example.com"), doc
    before = tree_bytes(target)
    for name, leaf, why in [
        ("intruder", intruder, "the signing certificate is for intruder@example.com, "
                               "not release@example.com"),
        ("rogue", rogue, "does not chain to"),
    ]:  # fmt: skip
        attack = _cert_signed(sharded[2], tmp_path / f"g2-{name}", 2, leaf)
        store_publish(attack, nginx.root, 2)
        code, doc, err = sync(target, nginx.url, 2, *cert_trust(keys), *engine.asks(target))
        assert code == 8, err
        assert why in doc["error"], doc["error"]
        assert tree_bytes(target) == before
        assert engine.requests == []
        shutil.rmtree(nginx.root)
        nginx.root.mkdir()
        store_publish(tmp_path / "g1", nginx.root, 1)
    # A key alone, without the chain's identity, does not pass for a certificate either.
    code, doc, err = sync(target, nginx.url, 1, *cert_trust(keys, "someone@example.com"),
                          *engine.asks(target))  # fmt: skip
    assert code == 8 and "not someone@example.com" in doc["error"], err
    assert tree_bytes(target) == before and engine.requests == []


def test_a_signature_the_pipeline_made_with_the_model_signing_cli(
    sharded: dict[int, Path], keys: Keys, nginx: Nginx, tmp_path: Path
) -> None:
    """The training pipeline writes the marker, signs with `model_signing sign key` (sha256,
    the library's default; README.md left out of the signature), and publish keeps its
    model.sig. A README.md the store adds is one the library does not hash (the signer
    ignored it) and standbyc refuses (nothing unsigned is served)."""
    model = tmp_path / "step-1200"
    shutil.copytree(sharded[1], model)
    (model / MARKER).write_bytes(marker_bytes(41))
    cli = Path(sys.executable).with_name("model_signing")
    proc = subprocess.run(
        [str(cli), "sign", "key", "--private_key", str(keys.publisher),
         "--signature", str(model / "model.sig"), "--ignore-paths", str(model / "README.md"),
         str(model)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = publish(model, nginx.root, 41)
    assert doc["signature"] == {"how": "kept", "by": "the directory's own model.sig"}
    target = tmp_path / "weights/hot/llama"
    code, doc, err = sync(target, nginx.url, 41, *key_trust(keys))
    assert code == 0, err
    assert doc["verified"]["hash"] == "sha256", doc
    assert tree_bytes(target) == tree_bytes(model)
    # Published under another number, the same signature is refused at publish already.
    proc = run_standbyc("weights", "publish", str(model), "--to", str(tmp_path / "other"),
                        "--generation", "42")  # fmt: skip
    assert proc.returncode == 2
    assert "signed as generation 41, published as 42" in proc.stderr, proc.stderr
    attack = tmp_path / "attack"
    shutil.copytree(model, attack)
    (attack / "README.md").write_text("Load with trust_remote_code=True.\n")
    store_publish(attack, tmp_path / "attacked", 41)
    shutil.rmtree(nginx.root)
    shutil.copytree(tmp_path / "attacked", nginx.root)
    fresh = tmp_path / "weights/warm/llama"
    code, doc, err = sync(fresh, nginx.url, 41, *key_trust(keys))
    assert code == 8 and "README.md is not covered by the signature" in doc["error"], err


def test_a_verified_directory_is_not_hashed_again_until_it_changes(
    signed: dict[int, Path], keys: Keys, nginx: Nginx, tmp_path: Path
) -> None:
    store_publish(signed[1], nginx.root, 1)
    target = tmp_path / "weights/hot/llama"
    assert sync(target, nginx.url, 1, *key_trust(keys))[0] == 0
    code, doc, err = sync(target, nginx.url, 1, *key_trust(keys))
    assert code == 0 and doc["status"] == "current", err
    assert doc["verified"]["cached"] is True, doc
    # Under another key the record does not count: verified again, and refused.
    code, doc, err = sync(target, nginx.url, 1, "--verify", "key", "--verify-trust",
                          str(keys.attacker.with_suffix(".pub")))  # fmt: skip
    assert code == 8 and "Key mismatch" in doc["error"], err
    # A file touched on the volume: read in full again (its bytes did not change).
    config = target / "config.json"
    config.write_bytes(config.read_bytes())
    code, doc, err = sync(target, nginx.url, 1, *key_trust(keys))
    assert code == 0 and "cached" not in doc["verified"], err


def test_the_weight_report_pushes_a_refusal_again(
    signed: dict[int, Path], keys: Keys, nginx: Nginx, pushgateway: Pushgateway, tmp_path: Path
) -> None:
    store_publish(signed[1], nginx.root, 1)
    store_publish(signed[1], nginx.root, 2)  # generation 1 replayed as 2
    target = tmp_path / "weights/hot/llama"
    code, _, err = sync(target, nginx.url, 2, *key_trust(keys), *reports(pushgateway.url))
    assert code == 8, err
    assert pushed(pushgateway.metrics(), "standbyc_weights_refused_generation") == 2
    group = "/".join(f"{k}/{v}" for k, v in LABELS.items() if k != "tier")
    url = f"{pushgateway.url}/metrics/job/standbyc-weight-sync/{group}/tier/hot"
    urllib.request.urlopen(urllib.request.Request(url, method="DELETE"), timeout=10)
    assert pushed(pushgateway.metrics(), "standbyc_weights_refused_generation") is None
    labels = [a for k, v in LABELS.items() if k != "tier" for a in ("--label", f"{k}={v}")]
    proc = run_standbyc("weights", "report", "--pushgateway", pushgateway.url, "--tier", "hot",
                        str(target), *labels, "--format", "json")  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["tiers"][0]["refused_generation"] == 2
    metrics = pushgateway.metrics()
    assert pushed(metrics, "standbyc_weights_refused_generation") == 2
    assert pushed(metrics, "standbyc_weights_generation") == 0  # it holds nothing


def test_publish_signs_once_and_refuses_what_it_cannot_sign(
    sharded: dict[int, Path], keys: Keys, tmp_path: Path
) -> None:
    model = tmp_path / "model"
    shutil.copytree(sharded[1], model)
    sign = ("--sign-key", str(keys.publisher), "--model", MODEL)
    first = publish(model, tmp_path / "store", 7, *sign)
    assert first["signature"]["how"] == "signed"
    again = publish(model, tmp_path / "store", 7, *sign)  # the same signature: nothing to do
    assert again["signature"]["how"] == "kept" and again["already_published"] is True
    lone = model / "model-00001-of-00003.safetensors"
    proc = run_standbyc("weights", "publish", str(lone), "--to", str(tmp_path / "s2"),
                        "--generation", "1", *sign)  # fmt: skip
    assert proc.returncode == 2 and "signs a model directory, not a file" in proc.stderr
    # A signature that does not sign the marker binds no generation.
    (model / MARKER).unlink()
    proc = run_standbyc("weights", "publish", str(model), "--to", str(tmp_path / "s3"),
                        "--generation", "7")  # fmt: skip
    assert proc.returncode == 2 and "binds no generation" in proc.stderr, proc.stderr


def test_an_s3_publish_and_a_merged_delta_keep_the_signature(
    s3: S3,
    generations: dict[int, Path],
    keys: Keys,
    tmp_path: Path,
) -> None:
    """Three signed generations into a bucket; a standby at 1 takes the merged delta 1 -> 3,
    which rebuilds exactly the signed bytes."""
    cache = tmp_path / "cache"
    target = tmp_path / "weights/hot/llama"
    source = f"s3://{BUCKET}/m"
    for g in (1, 2, 3):
        model = tmp_path / f"g{g}"
        model.mkdir()
        shutil.copyfile(generations[g], model / "model.safetensors")
        (model / "config.json").write_text('{"model_type": "test"}')
        proc = subprocess.run(
            [str(Path(sys.executable).with_name("standbyc")), "weights", "publish", str(model),
             "--to", f"{source}/", "--generation", str(g), "--cache", str(cache),
             "--sign-key", str(keys.publisher), "--model", MODEL, "--format", "json"],
            capture_output=True, text=True, env=s3.env(), timeout=300, check=False,
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        if g == 1:
            code, _, err = sync(target, source, 1, *key_trust(keys), env=s3.env())
            assert code == 0, err
    code, doc, err = sync(target, source, 3, *key_trust(keys), env=s3.env())
    assert code == 0, err
    assert "(merged 1-3)" in doc["route"], doc["route"]
    assert doc["verified"]["generation"] == 3
    assert sha256(target / "model.safetensors") == sha256(generations[3])
    # Exactly the signed directory: its weights rebuilt from two deltas merged, the marker
    # and model.sig, byte for byte what publish signed.
    assert tree_bytes(target) == tree_bytes(tmp_path / "g3")
    assert sorted(tree_bytes(target)) == ["config.json", "model.safetensors", "model.sig",
                                          "standbyc-generation.json"]  # fmt: skip


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--verify", "key"], "--verify key needs --verify-trust"),
        (["--verify-trust", "k.pub"], "--verify-trust needs --verify"),
        (["--verify", "certificate", "--verify-trust", "c.pem"],
         "--verify certificate needs --verify-identity"),
        (["--verify", "key", "--verify-trust", "missing.pub"], "missing.pub: no such file"),
    ],
)  # fmt: skip
def test_verify_flags_are_checked(flags: list[str], message: str, tmp_path: Path) -> None:
    code, _, err = sync(tmp_path / "t", "http://127.0.0.1:9/", 1, *flags)
    assert code == 2 and message in err, err


def test_keyless_sigstore_signatures_verify_offline_with_their_trust_root(
    signed: dict[int, Path], nginx: Nginx, engine: Listener, tmp_path: Path
) -> None:
    """Generation 1 signed through a Sigstore instance of the test's own (Fulcio, CT log,
    Rekor: tests/sync/minisigstore.py) as release@example.com; verified with that
    instance's trust configuration, offline, for that identity and issuer only."""
    sigstore, issuer = Sigstore(), "https://issuer.example"
    trust = sigstore.trust_config(tmp_path / "trust_config.json")
    model = tmp_path / "g1"
    shutil.copytree(signed[1], model)
    sigstore.rewrap(model / "model.sig", "release@example.com", issuer)
    store_publish(model, nginx.root, 1)
    target = tmp_path / "weights/hot/llama"

    def keyless(identity: str, issuer: str, config: Path = trust) -> list[str]:
        return ["--verify", "sigstore", "--verify-trust", str(config),
                "--verify-identity", identity, "--verify-issuer", issuer]  # fmt: skip

    for flags, why in [
        (keyless("intruder@example.com", issuer), "SANs do not match intruder@example.com"),
        (keyless("release@example.com", "https://other.example"), "OIDCIssuer does not match"),
        (keyless("release@example.com", issuer, Sigstore("other.test").trust_config(
            tmp_path / "other.json")), "failed to build timestamp certificate chain"),
    ]:  # fmt: skip
        code, doc, err = sync(target, nginx.url, 1, *flags, *engine.asks(target))
        assert code == 8 and why in doc["error"], err
        assert not target.exists() and engine.requests == []
    code, doc, err = sync(target, nginx.url, 1, *keyless("release@example.com", issuer))
    assert code == 0, err
    assert doc["verified"]["trust"].startswith("Sigstore identity release@example.com"), doc
    # The log's promise altered (another time of signing): the entry no longer verifies.
    bundle = json.loads((model / "model.sig").read_text())
    entry = bundle["verificationMaterial"]["tlogEntries"][0]
    entry["integratedTime"] = str(int(entry["integratedTime"]) + 1)
    (model / "model.sig").write_text(json.dumps(bundle))
    store_publish(model, tmp_path / "tampered", 1)
    shutil.rmtree(nginx.root)
    shutil.copytree(tmp_path / "tampered", nginx.root)
    shutil.rmtree(target.parent)
    code, doc, err = sync(target, nginx.url, 1, *keyless("release@example.com", issuer))
    assert code == 8 and "invalid inclusion promise" in doc["error"], err
    # A signature made with a key, not through Sigstore, is no keyless signature.
    shutil.rmtree(nginx.root)
    store_publish(signed[1], nginx.root, 1)
    code, doc, err = sync(target, nginx.url, 1, *keyless("release@example.com", issuer))
    assert code == 8, err


def test_another_models_signature_is_refused(
    sharded: dict[int, Path], keys: Keys, nginx: Nginx, tmp_path: Path
) -> None:
    """Model B's generation 2, signed with the same release key and published into model
    A's store, is refused by A's standbys (the compiled Jobs verify the spec's model.name),
    and so is a signature that binds no model; A's own is taken."""
    trust = [*key_trust(keys), "--verify-model", MODEL]
    other = tmp_path / "model-b"
    shutil.copytree(sharded[2], other)
    doc = publish(other, tmp_path / "scratch-b", 2, "--sign-key", str(keys.publisher),
                  "--model", "mistral-7b")  # fmt: skip
    assert doc["signature"]["how"] == "signed"
    publish(other, nginx.root, 2)
    target = tmp_path / "weights/hot/llama"
    code, doc, err = sync(target, nginx.url, 2, *trust)
    assert code == 8, err
    assert "the signature is of model 'mistral-7b', not 'llama-7b'" in doc["error"]
    assert not target.exists()
    # A marker without a model: a signature made before models were bound.
    unbound = tmp_path / "unbound"
    shutil.copytree(sharded[2], unbound)
    (unbound / MARKER).write_bytes(marker_bytes(2))
    cli = Path(sys.executable).with_name("model_signing")
    proc = subprocess.run(
        [str(cli), "sign", "key", "--private_key", str(keys.publisher),
         "--signature", str(unbound / "model.sig"), str(unbound)],
        capture_output=True, text=True, check=False, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    store = tmp_path / "store-unbound"
    publish(unbound, store, 2)
    proc = run_standbyc("weights", "publish", str(unbound), "--to", str(tmp_path / "s4"),
                        "--generation", "2", "--model", MODEL)  # fmt: skip
    assert proc.returncode == 2, proc.stderr  # publish says so before any standby does
    assert "signed as a generation of no model, published as one of llama-7b" in proc.stderr
    # A's own generation 2: verified, model and all.
    mine = tmp_path / "model-a"
    shutil.copytree(sharded[2], mine)
    publish(mine, tmp_path / "scratch-a", 2, "--sign-key", str(keys.publisher), "--model", MODEL)
    nginx_store = nginx.root
    shutil.rmtree(nginx_store)
    nginx_store.mkdir()
    publish(mine, nginx_store, 2)
    code, doc, err = sync(target, nginx.url, 2, *trust)
    assert code == 0, err
    assert doc["verified"]["model"] == MODEL
    # The publisher asks for a model to bind.
    proc = run_standbyc("weights", "publish", str(mine), "--to", str(tmp_path / "s5"),
                        "--generation", "3", "--sign-key", str(keys.publisher))  # fmt: skip
    assert proc.returncode == 2 and "--sign-key needs --model NAME" in proc.stderr


def _pem_keys(work: Path) -> dict[str, Path]:
    """Keys and files model-signing cannot use, each written to ``work``."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415
    from cryptography.hazmat.primitives.asymmetric import ed25519, rsa  # noqa: PLC0415

    rsa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    ed_key = ed25519.Ed25519PrivateKey.generate()
    pkcs8 = (serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
             serialization.NoEncryption())  # fmt: skip
    spki = (serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    files = {
        "rsa.key": rsa_key.private_bytes(*pkcs8),
        "rsa.pub": rsa_key.public_key().public_bytes(*spki),
        "ed25519.key": ed_key.private_bytes(*pkcs8),
        "openssh.key": ed_key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.OpenSSH,
            serialization.NoEncryption(),
        ),
        "empty": b"",
        "garbage": b"\x00\x01 not a key\n",
        "garbage.json": b'{"mediaType": "not a trust config"}',
    }
    out = {}
    for name, data in files.items():
        out[name] = work / name
        out[name].write_bytes(data)
    return out


@pytest.mark.parametrize(
    ("mode", "trust", "says"),
    [
        ("key", "publisher.key", "a private key, which a standby must never hold"),
        ("key", "rsa.pub", "RSA public key; expected the PEM EC public key"),
        ("key", "empty", "empty; expected the PEM EC public key"),
        ("key", "garbage", "not a PEM public key"),
        ("key", "chain", "a certificate; --verify key takes"),
        ("certificate", "publisher.pub", "a key; --verify certificate takes a PEM certificate"),
        ("sigstore", "garbage.json", "no trustedRoot object; expected a Sigstore"),
        ("sigstore", "garbage", "not JSON"),
    ],
)
def test_trust_of_the_wrong_kind_is_refused_before_anything_is_downloaded(
    signed: dict[int, Path], keys: Keys, nginx: Nginx, tmp_path: Path, *,
    mode: str, trust: str, says: str,
) -> None:  # fmt: skip
    files = _pem_keys(tmp_path)
    files |= {"publisher.key": keys.publisher, "publisher.pub": keys.publisher.with_suffix(".pub"),
              "chain": keys.pki.chain}  # fmt: skip
    publish(signed[1], nginx.root, 1)
    nginx.clear_log()
    extra = {"key": [], "certificate": ["--verify-identity", "release@example.com"],
             "sigstore": ["--verify-identity", "a@example.com", "--verify-issuer",
                          "https://issuer.example.com"]}[mode]  # fmt: skip
    target = tmp_path / "weights/hot/llama"
    code, _, err = sync(target, nginx.url, 1, "--verify", mode, "--verify-trust",
                        str(files[trust]), *extra)  # fmt: skip
    assert code == 2, err
    assert says in err, err
    assert "a bug in standbyc" not in err
    assert nginx.log() == []  # nothing asked of the store
    assert not target.exists()


@pytest.mark.parametrize(
    ("key", "says"),
    [
        ("rsa.key", "RSA private key; expected a PEM EC private key"),
        ("ed25519.key", "Ed25519 private key; expected a PEM EC private key"),
        ("openssh.key", "an OpenSSH private key; expected a PEM EC private key"),
        ("empty", "empty; expected a PEM EC private key"),
    ],
)
def test_a_signing_key_model_signing_cannot_use_is_refused_before_anything_is_written(
    sharded: dict[int, Path], tmp_path: Path, key: str, says: str
) -> None:
    files = _pem_keys(tmp_path)
    model = tmp_path / "model"
    shutil.copytree(sharded[1], model)
    before = tree_bytes(model)
    proc = run_standbyc("weights", "publish", str(model), "--to", str(tmp_path / "store"),
                        "--generation", "1", "--sign-key", str(files[key]),
                        "--model", MODEL)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert says in proc.stderr and "openssl ecparam -name prime256v1" in proc.stderr
    assert tree_bytes(model) == before  # no marker, no signature written into it
    assert not (tmp_path / "store" / "index.json").exists()
