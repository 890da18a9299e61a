"""A signed generation: a model directory with an OpenSSF Model Signing signature in it.

The signature is ``model.sig``, a Sigstore bundle made by the ``model-signing`` library
(sigstore/model-transparency): a DSSE envelope over an in-toto statement that lists every
file of the directory with its digest. The directory also holds ``standbyc-generation.json``,
which says which generation it is; being a file of the directory, it is signed like the
others. That is what binds a signature to one generation: the signature of generation 41,
replayed in the store with 41's files as generation 42, still verifies, but says 41.

The verification itself is the library's (``verifying.Config``: the signature, the key,
certificate chain or Sigstore identity, and every signed file's digest, hashed again
here). What this module adds is what the library leaves to its caller: that nothing in the
directory escapes the signature (files under the signer's ``ignore_paths`` are not hashed
by the library), that the signed marker says the generation asked for, and, for a
certificate chain, which identity the signing certificate carries. Those are read from
the bundle the library has just verified.

``model_signing`` (and sigstore, pyOpenSSL under it) is imported only when a signature is
made or checked: about 0.7 s, paid by signed syncs alone.
"""

from __future__ import annotations

import ast
import base64
import binascii
import contextlib
import hashlib
import io
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler.weights.sync.errors import SignatureRefused, StoreError

SIGNATURE = "model.sig"
MARKER = "standbyc-generation.json"
MARKER_FORMAT = "standbyc-generation"
MARKER_CAP = 4096
BUNDLE_CAP = 64 << 20  # a bundle lists one digest per file (or shard): a few MB at most
PREDICATE = "https://model_signing/signature/v1.0"
_METHODS = ("files", "shards")
MODES = ("key", "certificate", "sigstore")


def marker_bytes(generation: int, model: str = "") -> bytes:
    """The marker a signature covers: the generation, and the model it is a generation of
    (the spec's model.name), so another model's signed generation is no use here."""
    doc: dict[str, Any] = {"format": MARKER_FORMAT, "generation": generation}
    if model:
        doc["model"] = model
    return (json.dumps(doc, sort_keys=True) + "\n").encode()


@dataclass(frozen=True)
class Marker:
    generation: int
    model: str  # "": a marker that names no model


def read_marker(path: Path) -> Marker:
    """What a marker file says; StoreError when it says no generation."""
    try:
        with path.open("rb") as f:
            data = f.read(MARKER_CAP + 1)
        doc = json.loads(data) if len(data) <= MARKER_CAP else None
    except (OSError, ValueError) as exc:
        raise StoreError(f"{path}: not a generation marker ({exc})") from None
    gen = doc.get("generation") if isinstance(doc, dict) else None
    model = doc.get("model", "") if isinstance(doc, dict) else None
    if doc is None or doc.get("format") != MARKER_FORMAT or type(gen) is not int:
        raise StoreError(
            f"{path}: not a generation marker (expected "
            f"{marker_bytes(42, 'llama-7b').decode().strip()})"
        )
    if not isinstance(model, str):
        raise StoreError(f"{path}: its model is not a string")
    return Marker(gen, model)


@dataclass(frozen=True)
class Trust:
    """What a generation must be signed with: a public key; a certificate chain and the
    identity the signing certificate carries; or a Sigstore identity and OIDC issuer, with
    a trust configuration (its roots, offline)."""

    mode: str  # one of MODES
    material: Path  # PEM public key, PEM chain, or Sigstore ClientTrustConfig JSON
    identity: str = ""
    issuer: str = ""
    model: str = ""  # the model the generation must be signed as ("": any)

    def fingerprint(self) -> str:
        """Changes with the trust: a generation verified under another key counts as not
        verified."""
        try:
            material = hashlib.sha256(self.material.read_bytes()).hexdigest()
        except OSError as exc:
            raise StoreError(f"{self.material}: cannot read the trust material: {exc}") from None
        doc = [self.mode, material, self.identity, self.issuer, self.model]
        return hashlib.sha256(json.dumps(doc).encode()).hexdigest()

    def describe(self) -> str:
        if self.mode == "key":
            return f"the public key {self.material}"
        if self.mode == "certificate":
            return f"a certificate for {self.identity} under the chain {self.material}"
        return f"Sigstore identity {self.identity} from {self.issuer} (trust {self.material})"


@dataclass(frozen=True)
class Bundle:
    """What a verified ``model.sig`` says: the signed names and how they were hashed."""

    files: frozenset[str]  # every file the signature lists
    serialization: dict[str, Any]  # how the signer hashed them (method, hash_type, ...)
    leaf: bytes | None  # DER of the signing certificate, if the bundle carries one

    def to_json(self) -> dict[str, Any]:
        s = self.serialization
        return {"files": len(self.files), "hash": s["hash_type"], "method": s["method"]}


# What a malformed bundle can raise while it is read: anything an attacker who can write
# the store can reach must be a refusal (exit 8, pushed), never an internal error.
_MALFORMED = (OSError, ValueError, KeyError, TypeError, IndexError, AttributeError,
              RecursionError, binascii.Error)  # fmt: skip


def read_bundle(path: Path) -> Bundle:
    """Parse ``model.sig`` (a Sigstore bundle of an in-toto statement); SignatureRefused
    when it is not one the library's v1.0 format makes."""
    try:
        with path.open("rb") as f:
            raw = f.read(BUNDLE_CAP + 1)
        if len(raw) > BUNDLE_CAP:
            raise ValueError(f"over {BUNDLE_CAP} bytes")
        doc = _mapping(json.loads(raw), "the bundle")
        envelope = _mapping(doc["dsseEnvelope"], "dsseEnvelope")
        payload = _mapping(
            json.loads(base64.b64decode(envelope["payload"], validate=True)), "the payload"
        )
        statement_type = payload["predicateType"]
        predicate = _mapping(payload["predicate"], "the predicate")
        serialization = _mapping(predicate["serialization"], "serialization")
        names = [_mapping(r, "a resource")["name"] for r in predicate["resources"]]
        if not all(isinstance(n, str) for n in names):
            raise TypeError("a resource name is not a string")
        method = serialization["method"]
        if not isinstance(serialization.get("hash_type"), str) or method not in _METHODS:
            raise ValueError(f"serialization {serialization!r}")
        leaf = _leaf(doc)
    except _MALFORMED as exc:
        raise SignatureRefused(f"{path}: not a model signature bundle ({_said(exc)})") from None
    if statement_type != PREDICATE:
        raise SignatureRefused(
            f"{path}: a signature of predicate {statement_type!r}, not {PREDICATE}: before "
            "model_signing 1.0 a signature did not list every file; sign again with 1.0 or later"
        )
    if method == "shards":  # "<file>:<start>:<end>"
        names = [n.rsplit(":", 2)[0] for n in names]
    return Bundle(frozenset(names), serialization, leaf)


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise TypeError(f"{what} is a {type(value).__name__}, not an object")
    return value


def _said(exc: BaseException) -> str:
    """A short reason: a nesting too deep for the parser says so, not a stack's worth."""
    if isinstance(exc, RecursionError):
        return "nested too deep"
    return str(exc)[:300] or type(exc).__name__


def _leaf(doc: dict[str, Any]) -> bytes | None:
    """The signing certificate's DER, if the bundle carries one."""
    material = _mapping(doc.get("verificationMaterial") or {}, "verificationMaterial")
    chain = _mapping(material.get("x509CertificateChain") or {}, "x509CertificateChain")
    certificates = chain.get("certificates") or []
    if certificates:
        raw = _mapping(certificates[0], "a certificate")["rawBytes"]
    else:
        raw = _mapping(material.get("certificate") or {}, "certificate").get("rawBytes")
    if raw is None:
        return None
    if not isinstance(raw, str):
        raise TypeError("rawBytes is not a string")
    return base64.b64decode(raw, validate=True)


def certificate_identities(der: bytes) -> list[str]:
    """The identities a certificate carries: its subject alternative names (email, URI,
    DNS), else its subject's common name."""
    from cryptography import x509  # noqa: PLC0415 - with model_signing's dependencies

    cert = x509.load_der_x509_certificate(der)
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        found = [
            *san.get_values_for_type(x509.RFC822Name),
            *san.get_values_for_type(x509.UniformResourceIdentifier),
            *san.get_values_for_type(x509.DNSName),
        ]
    except x509.ExtensionNotFound:
        found = []
    if not found:
        attrs = cert.subject.get_attributes_for_oid(x509.oid.NameOID.COMMON_NAME)
        found = [str(a.value) for a in attrs]
    return found


def directory_files(root: Path) -> set[str]:
    """Every file under ``root``, relative, with '/'."""
    out: set[str] = set()
    for where, _, files in os.walk(root):
        rel = os.path.relpath(where, root)
        out.update(name if rel == "." else f"{rel}/{name}" for name in files)
    return out


def _hashing(bundle: Bundle) -> Any:
    """The library's hashing as the signature says it was done (its own guess, but with
    git files hashed like any other: a served file the signer left out must show up as
    one, not be skipped; and no symlink followed)."""
    from model_signing import hashing  # noqa: PLC0415

    s = bundle.serialization
    config = hashing.Config().set_ignored_paths(
        paths=s.get("ignore_paths") or (), ignore_git_paths=False
    )
    if s["method"] == "shards":
        return config.use_shard_serialization(
            hashing_algorithm=s["hash_type"], shard_size=s["shard_size"]
        )
    return config.use_file_serialization(hashing_algorithm=s["hash_type"])


def library_verify(directory: Path, trust: Trust, bundle: Bundle) -> None:
    """The model-signing library's verification of ``directory`` against its ``model.sig``:
    the signature with the trust, then every signed file hashed again (with the hash the
    signature names) and compared. SignatureRefused with what failed."""
    from model_signing import verifying  # noqa: PLC0415 - slow import, signed syncs only

    config = verifying.Config()
    if trust.mode == "key":
        config.use_elliptic_key_verifier(public_key=trust.material)
    elif trust.mode == "certificate":
        config.use_certificate_verifier(certificate_chain=[trust.material])
    else:
        config.use_sigstore_verifier(
            identity=trust.identity, oidc_issuer=trust.issuer, trust_config=trust.material
        )
    # The library prints warnings on stdout, where --format json writes its one document.
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            config.set_hashing_config(_hashing(bundle))
            config.verify(directory, directory / SIGNATURE)
        except Exception as exc:  # the library's errors have no common base
            raise SignatureRefused(_why(exc, trust)) from None


def _why(exc: Exception, trust: Trust) -> str:
    name = type(exc).__name__
    text = str(exc).strip()
    if name == "InvalidSignature":
        return f"the signature was not made with {trust.describe()}"
    if text.startswith("Signature mismatch:"):  # the library's list of differences, as text
        try:
            found = ast.literal_eval(text.removeprefix("Signature mismatch:").strip())
        except (ValueError, SyntaxError):
            found = [text]
        # Without the model's (directory's) name and the digests' reprs.
        parts = [re.sub(r" in model '[^']*'|: Expected .*", "", str(f)) for f in found]
        return "the files differ from what was signed: " + "; ".join(parts)
    if name == "X509StoreContextError":
        return f"the signing certificate does not chain to {trust.material}: {text}"
    return f"the signature does not verify with {trust.describe()}: {name}: {text or '(no detail)'}"
