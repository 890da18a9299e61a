"""What a signing key and a trust file must be, checked before anything is downloaded or
written: what model-signing 1.1 takes (an elliptic-curve key on P-256, P-384 or P-521, in
PEM; a PEM certificate chain; a Sigstore ClientTrustConfig), and anything else refused,
naming the format it should have and the ``openssl`` commands that make one."""

from __future__ import annotations

import json
from pathlib import Path

from compiler.weights.sync.errors import StoreError

CURVES = ("secp256r1", "secp384r1", "secp521r1")  # what model-signing's EC signer takes
MAKE_KEYS = (
    "openssl ecparam -name prime256v1 -genkey -noout | openssl pkcs8 -topk8 -nocrypt "
    "-out release.key; openssl ec -in release.key -pubout -out release.pub"
)
READ_CAP = 1 << 20  # a key, a chain or a trust configuration: well under a MiB


def _read(path: Path, what: str) -> bytes:
    try:
        with path.open("rb") as f:
            data = f.read(READ_CAP + 1)
    except OSError as exc:
        raise StoreError(f"{path}: cannot read {what} ({exc.strerror})") from None
    if not data.strip():
        raise StoreError(f"{path}: empty; expected {what}")
    if len(data) > READ_CAP:
        raise StoreError(f"{path}: over {READ_CAP} bytes; expected {what}")
    return data


def _curve(key: object) -> str | None:
    from cryptography.hazmat.primitives.asymmetric import ec  # noqa: PLC0415

    if isinstance(key, ec.EllipticCurvePrivateKey | ec.EllipticCurvePublicKey):
        return str(key.curve.name)
    return None


def _kind(key: object) -> str:
    name = type(key).__name__.removeprefix("_")
    return name.replace("PrivateKey", " private key").replace("PublicKey", " public key")


def check_signing_key(path: Path) -> None:
    """A PEM EC private key model-signing can sign with, unencrypted."""
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    want = f"a PEM EC private key on {', '.join(CURVES)}, unencrypted (make one: {MAKE_KEYS})"
    data = _read(path, want)
    if data.lstrip().startswith(b"-----BEGIN OPENSSH PRIVATE KEY-----"):
        raise StoreError(f"{path}: an OpenSSH private key; expected {want}")
    try:
        key = serialization.load_pem_private_key(data, password=None)
    except TypeError:  # what cryptography raises for a key that needs a password
        raise StoreError(f"{path}: an encrypted private key; expected {want}") from None
    except ValueError as exc:
        raise StoreError(f"{path}: not a PEM private key ({exc}); expected {want}") from None
    curve = _curve(key)
    if curve not in CURVES:
        raise StoreError(f"{path}: {_kind(key) if curve is None else curve}; expected {want}")


def check_trust(mode: str, path: Path) -> None:
    """The trust of ``--verify mode``: what that mode verifies with, and nothing else."""
    if mode == "key":
        _public_key(path)
    elif mode == "certificate":
        _chain(path)
    else:
        _trust_config(path)


def _public_key(path: Path) -> None:
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    want = f"the PEM EC public key of the signing key, on {', '.join(CURVES)} ({MAKE_KEYS})"
    data = _read(path, want)
    if b"PRIVATE KEY-----" in data:
        raise StoreError(f"{path}: a private key, which a standby must never hold; expected {want}")
    if b"-----BEGIN CERTIFICATE-----" in data:
        raise StoreError(f"{path}: a certificate; --verify key takes {want} (a certificate "
                         "chain is --verify certificate's)")  # fmt: skip
    try:
        key = serialization.load_pem_public_key(data)
    except (ValueError, TypeError) as exc:
        raise StoreError(f"{path}: not a PEM public key ({exc}); expected {want}") from None
    curve = _curve(key)
    if curve not in CURVES:
        raise StoreError(f"{path}: {_kind(key) if curve is None else curve}; expected {want}")


def _chain(path: Path) -> None:
    from cryptography import x509  # noqa: PLC0415

    want = "a PEM certificate chain: your root, and the intermediates below it"
    data = _read(path, want)
    if b"-----BEGIN CERTIFICATE-----" not in data:
        kind = "a key" if b"KEY-----" in data else "no certificate"
        raise StoreError(f"{path}: {kind}; --verify certificate takes {want}")
    try:
        x509.load_pem_x509_certificates(data)
    except ValueError as exc:
        raise StoreError(f"{path}: a certificate does not parse ({exc}); expected {want}") from None


def _trust_config(path: Path) -> None:
    want = (
        "a Sigstore ClientTrustConfig (JSON, as `sigstore trust-instance` or your TUF root gives)"
    )
    data = _read(path, want)
    try:
        doc = json.loads(data)
    except ValueError as exc:
        raise StoreError(f"{path}: not JSON ({exc}); expected {want}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("trustedRoot"), dict):
        raise StoreError(f"{path}: no trustedRoot object; expected {want}")
