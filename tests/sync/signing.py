"""Keys and a small PKI made in the tests, for signing model directories for real.

- ``ec_key``: an elliptic-curve (P-256) key pair as PEM files, as `openssl ecparam
  -genkey` would write them.
- ``Pki``: a root CA, an intermediate CA under it, and signing certificates issued by the
  intermediate to an identity (a subject alternative name: an email address), with the
  key usage model-signing checks (digital signature, code signing).
- The standby's side: its sync command, and a ``Listener`` where its engines would be.
"""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
import threading
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

NOW = dt.datetime.now(dt.UTC)


def ec_key(path: Path) -> Path:
    """Write a P-256 private key to ``path`` and its public key beside it (``.pub``)."""
    key = ec.generate_private_key(ec.SECP256R1())
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.with_suffix(".pub").write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return path


def _pem(cert: x509.Certificate) -> bytes:
    return cert.public_bytes(serialization.Encoding.PEM)


@dataclass
class Ca:
    name: str
    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate


def _builder(
    subject: str, issuer: x509.Name, public: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    return (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)]))
        .issuer_name(issuer)
        .public_key(public)
        .serial_number(x509.random_serial_number())
        .not_valid_before(NOW - dt.timedelta(hours=1))
        .not_valid_after(NOW + dt.timedelta(days=30))
    )


def _ca(name: str, parent: Ca | None) -> Ca:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    cert = (
        _builder(name, parent.cert.subject if parent else subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(False, False, False, False, False, True, True, False, False),
            critical=True,
        )
        .sign(parent.key if parent else key, hashes.SHA256())
    )
    return Ca(name, key, cert)


@dataclass
class Pki:
    """A root CA and an intermediate, written under ``root`` as PEM files."""

    root: Path
    top: Ca
    intermediate: Ca

    @classmethod
    def make(cls, root: Path, name: str = "Example Models Root CA") -> Pki:
        root.mkdir(parents=True, exist_ok=True)
        top = _ca(name, None)
        pki = cls(root, top, _ca(f"{name} Intermediate", top))
        # What a verifier trusts: the root and the intermediate, one PEM file.
        (root / "chain.pem").write_bytes(_pem(pki.intermediate.cert) + _pem(top.cert))
        (root / "intermediate.pem").write_bytes(_pem(pki.intermediate.cert))
        return pki

    @property
    def chain(self) -> Path:
        return self.root / "chain.pem"

    def leaf(self, identity: str) -> tuple[Path, Path]:
        """A signing key and its certificate, issued to ``identity``: (key, certificate)."""
        stem = identity.replace("@", "-at-")
        key_path = ec_key(self.root / f"{stem}.key")
        key = serialization.load_pem_private_key(key_path.read_bytes(), None)
        assert isinstance(key, ec.EllipticCurvePrivateKey)
        cert = (
            _builder(identity, self.intermediate.cert.subject, key.public_key())
            .add_extension(x509.SubjectAlternativeName([x509.RFC822Name(identity)]), False)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(True, False, False, False, False, False, False, False, False),
                critical=True,
            )
            .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), False)
            .sign(self.intermediate.key, hashes.SHA256())
        )
        cert_path = self.root / f"{stem}.pem"
        cert_path.write_bytes(_pem(cert))
        return key_path, cert_path


@dataclass(frozen=True)
class Keys:
    publisher: Path
    attacker: Path
    pki: Pki
    rogue: Pki  # another root, with a certificate for the publisher's identity


def make_keys(d: Path) -> Keys:
    return Keys(
        ec_key(d / "publisher.key"),
        ec_key(d / "attacker.key"),
        Pki.make(d / "pki"),
        Pki.make(d / "rogue", "Rogue Root CA"),
    )


# --- the standby's side --------------------------------------------------------------------

STANDBYC = Path(sys.executable).with_name("standbyc")  # the console script, as in the image
LABELS = {"namespace": "serving", "standbyc_spec": "signed", "tier": "hot"}


def sync(
    target: Path, source: str, generation: int, *extra: str, env: dict[str, str] | None = None
) -> tuple[int, dict[str, Any], str]:
    """`standbyc weights sync` of ``target`` to ``generation``: exit code, JSON, output."""
    proc = subprocess.run(
        [str(STANDBYC), "weights", "sync", "--source", source, "--generation", str(generation),
         "--target", str(target), "--lock-wait", "0", "--format", "json", *extra],
        capture_output=True, text=True, timeout=300, check=False, env=env,
    )  # fmt: skip
    doc = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    return proc.returncode, doc, proc.stderr + proc.stdout


def key_trust(keys: Keys) -> list[str]:
    return ["--verify", "key", "--verify-trust", str(keys.publisher.with_suffix(".pub"))]


def reports(url: str) -> list[str]:
    return ["--pushgateway", url, *(a for k, v in LABELS.items() for a in ("--label", f"{k}={v}"))]


def pushed(metrics: str, metric: str) -> float | None:
    """The value of ``metric`` for LABELS in a Pushgateway's exposition, or None."""
    for line in metrics.splitlines():
        if line.startswith(metric + "{") and all(f'{k}="{v}"' in line for k, v in LABELS.items()):
            return float(line.rsplit(" ", 1)[1])
    return None


class _Recorded(BaseHTTPRequestHandler):
    def _any(self) -> None:
        self.server.requests.append(f"{self.command} {self.path}")  # type: ignore[attr-defined]
        self.send_response(404)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_GET = do_POST = _any

    def log_message(self, *args: Any) -> None:
        pass


class Listener(ThreadingHTTPServer):
    """Where the tier's engines would be asked to load a generation: an HTTP server that
    records every request (and loads nothing: each is answered 404)."""

    def __init__(self) -> None:
        super().__init__(("127.0.0.1", 0), _Recorded)
        self.requests: list[str] = []
        threading.Thread(target=self.serve_forever, daemon=True).start()

    def asks(self, target: Path) -> list[str]:
        """The sync flags that ask the engines here to load ``target`` (SGLang's API)."""
        return ["--reload", "sglang", "--engines", f"http://127.0.0.1:{self.server_address[1]}",
                "--engine-model-path", str(target), "--reload-timeout", "5"]  # fmt: skip
