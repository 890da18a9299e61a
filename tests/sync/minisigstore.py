"""A Sigstore instance of the tests' own: a Fulcio CA, a certificate-transparency log and a
Rekor log, each an EC key made here, and the trust configuration that names them.

Keyless signing needs Fulcio (a short-lived certificate for an OIDC identity), a CT log
(an SCT embedded in it) and Rekor (the signature's entry, with an inclusion proof and a
signed checkpoint, and a signed entry timestamp): none is reachable from the tests, so this
plays all three, offline, in the formats sigstore-python verifies (protobuf-specs bundle
v0.3, RFC 6962 SCT over the precertificate, a dsse/0.0.1 Rekor entry in a one-leaf tree).
What it signs is the model-signing library's own statement: ``rewrap`` takes a bundle the
library made with a key and signs the same DSSE payload as ``identity`` would through
Sigstore. Verification is then sigstore-python's and model-signing's, unchanged.
"""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import json
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import rfc8785
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID, ObjectIdentifier

PAYLOAD_TYPE = "application/vnd.in-toto+json"
ISSUER_OID = ObjectIdentifier("1.3.6.1.4.1.57264.1.1")  # Fulcio: the OIDC issuer, raw
SCT_OID = ObjectIdentifier("1.3.6.1.4.1.11129.2.4.2")
START = "2020-01-01T00:00:00Z"


def _b64(data: bytes) -> str:
    return base64.b64encode(data).decode()


def _spki(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.public_key().public_bytes(
        serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
    )


def _sign(key: ec.EllipticCurvePrivateKey, data: bytes) -> bytes:
    return key.sign(data, ec.ECDSA(hashes.SHA256()))


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _der_octets(data: bytes) -> bytes:
    n = len(data)
    length = bytes([n]) if n < 0x80 else bytes([0x82, n >> 8, n & 0xFF])
    return b"\x04" + length + data


@dataclass
class Sigstore:
    name: str = "sigstore.test"
    ca: ec.EllipticCurvePrivateKey = field(default_factory=_key)
    ct: ec.EllipticCurvePrivateKey = field(default_factory=_key)
    rekor: ec.EllipticCurvePrivateKey = field(default_factory=_key)

    def __post_init__(self) -> None:
        now = dt.datetime.now(dt.UTC)
        subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{self.name} Fulcio")])
        self.root = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self.ca.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(days=1))
            .not_valid_after(now + dt.timedelta(days=365))
            .add_extension(x509.BasicConstraints(ca=True, path_length=1), critical=True)
            .add_extension(
                x509.KeyUsage(False, False, False, False, False, True, True, False, False),
                critical=True,
            )
            .add_extension(x509.SubjectKeyIdentifier.from_public_key(self.ca.public_key()), False)
            .sign(self.ca, hashes.SHA256())
        )

    # --- what a verifier trusts ----------------------------------------------------------

    def _log(self, key: ec.EllipticCurvePrivateKey, url: str) -> dict[str, Any]:
        return {
            "baseUrl": url,
            "hashAlgorithm": "SHA2_256",
            "publicKey": {
                "rawBytes": _b64(_spki(key)),
                "keyDetails": "PKIX_ECDSA_P256_SHA_256",
                "validFor": {"start": START},
            },
            "logId": {"keyId": _b64(hashlib.sha256(_spki(key)).digest())},
        }

    def trust_config(self, path: Path) -> Path:
        """A ClientTrustConfig JSON naming this instance's CA and logs."""
        root = {
            "mediaType": "application/vnd.dev.sigstore.trustedroot+json;version=0.1",
            "tlogs": [self._log(self.rekor, f"https://rekor.{self.name}")],
            "certificateAuthorities": [{
                "subject": {"organization": self.name, "commonName": f"{self.name} Fulcio"},
                "uri": f"https://fulcio.{self.name}",
                "certChain": {"certificates": [
                    {"rawBytes": _b64(self.root.public_bytes(serialization.Encoding.DER))}
                ]},
                "validFor": {"start": START},
            }],
            "ctlogs": [self._log(self.ct, f"https://ct.{self.name}")],
            "timestampAuthorities": [],
        }  # fmt: skip
        signing = {
            "mediaType": "application/vnd.dev.sigstore.signingconfig.v0.2+json",
            "caUrls": [{"url": f"https://fulcio.{self.name}", "majorApiVersion": 1,
                        "validFor": {"start": START}, "operator": self.name}],
            "oidcUrls": [{"url": f"https://oauth2.{self.name}", "majorApiVersion": 1,
                          "validFor": {"start": START}, "operator": self.name}],
            "rekorTlogUrls": [{"url": f"https://rekor.{self.name}", "majorApiVersion": 1,
                               "validFor": {"start": START}, "operator": self.name}],
            "tsaUrls": [],
            "rekorTlogConfig": {"selector": "ANY"},
            "tsaConfig": {"selector": "ANY"},
        }  # fmt: skip
        doc = {
            "mediaType": "application/vnd.dev.sigstore.clienttrustconfig.v0.1+json",
            "trustedRoot": root,
            "signingConfig": signing,
        }
        path.write_text(json.dumps(doc, indent=1))
        return path

    # --- Fulcio and the CT log -----------------------------------------------------------

    def _certificate(
        self, key: ec.EllipticCurvePrivateKey, identity: str, issuer: str, when: dt.datetime
    ) -> x509.Certificate:
        """A Fulcio-style certificate for ``identity`` with an embedded SCT."""
        serial = x509.random_serial_number()

        def builder() -> x509.CertificateBuilder:
            return (
                x509.CertificateBuilder()
                .subject_name(x509.Name([]))
                .issuer_name(self.root.subject)
                .public_key(key.public_key())
                .serial_number(serial)
                .not_valid_before(when - dt.timedelta(minutes=1))
                .not_valid_after(when + dt.timedelta(minutes=10))
                .add_extension(
                    x509.KeyUsage(True, False, False, False, False, False, False, False, False),
                    critical=True,
                )
                .add_extension(x509.ExtendedKeyUsage([ExtendedKeyUsageOID.CODE_SIGNING]), False)
                .add_extension(
                    x509.SubjectAlternativeName([x509.RFC822Name(identity)]), critical=True
                )
                .add_extension(
                    x509.AuthorityKeyIdentifier.from_issuer_public_key(self.ca.public_key()),
                    False,
                )
                .add_extension(x509.UnrecognizedExtension(ISSUER_OID, issuer.encode()), False)
            )

        pre = builder().sign(self.ca, hashes.SHA256())
        tbs = pre.tbs_certificate_bytes
        millis = int(when.timestamp() * 1000)
        issuer_key_id = hashlib.sha256(_spki(self.ca)).digest()
        signed = struct.pack("!BBQH", 0, 0, millis, 1) + issuer_key_id
        signed += struct.pack("!I", len(tbs))[1:] + tbs + struct.pack("!H", 0)
        sig = _sign(self.ct, signed)
        sct = (
            b"\x00" + hashlib.sha256(_spki(self.ct)).digest() + struct.pack("!QH", millis, 0)
            + b"\x04\x03" + struct.pack("!H", len(sig)) + sig
        )  # fmt: skip
        scts = struct.pack("!H", len(sct) + 2) + struct.pack("!H", len(sct)) + sct
        sct_ext = x509.UnrecognizedExtension(SCT_OID, _der_octets(scts))
        return builder().add_extension(sct_ext, False).sign(self.ca, hashes.SHA256())

    # --- Rekor -----------------------------------------------------------------------------

    def _entry(
        self, cert: x509.Certificate, payload: bytes, sig: bytes, when: int
    ) -> dict[str, Any]:
        pem = cert.public_bytes(serialization.Encoding.PEM)
        digest = {"algorithm": "sha256", "value": hashlib.sha256(payload).hexdigest()}
        spec = {
            "envelopeHash": digest,  # not checkable by a verifier (uncanonicalized JSON)
            "payloadHash": digest,
            "signatures": [{"signature": _b64(sig), "verifier": _b64(pem)}],
        }
        doc = {"apiVersion": "0.0.1", "kind": "dsse", "spec": spec}
        body = json.dumps(doc, separators=(",", ":")).encode()
        log_id = hashlib.sha256(_spki(self.rekor)).digest()
        root_hash = hashlib.sha256(b"\x00" + body).digest()  # a tree of this one leaf
        note = f"rekor.{self.name} - 1\n1\n{_b64(root_hash)}\n"
        line = _b64(log_id[:4] + _sign(self.rekor, note.encode()))
        promise = rfc8785.dumps(
            {"body": _b64(body), "integratedTime": when, "logID": log_id.hex(), "logIndex": 0}
        )
        return {
            "logIndex": "0",
            "logId": {"keyId": _b64(log_id)},
            "kindVersion": {"kind": "dsse", "version": "0.0.1"},
            "integratedTime": str(when),
            "inclusionPromise": {"signedEntryTimestamp": _b64(_sign(self.rekor, promise))},
            "inclusionProof": {
                "logIndex": "0",
                "rootHash": _b64(root_hash),
                "treeSize": "1",
                "hashes": [],
                "checkpoint": {"envelope": f"{note}\n\u2014 rekor.{self.name} {line}\n"},
            },
            "canonicalizedBody": _b64(body),
        }

    def rewrap(self, signature: Path, identity: str, issuer: str) -> None:
        """Sign again, as ``identity`` (vouched for by ``issuer``) through this instance,
        the statement the model-signing bundle ``signature`` signs; replace it."""
        payload = base64.b64decode(json.loads(signature.read_text())["dsseEnvelope"]["payload"])
        now = dt.datetime.now(dt.UTC).replace(microsecond=0)
        key = ec.generate_private_key(ec.SECP256R1())  # ephemeral, as keyless signing's
        cert = self._certificate(key, identity, issuer, now)
        pae = f"DSSEv1 {len(PAYLOAD_TYPE)} {PAYLOAD_TYPE} {len(payload)} ".encode() + payload
        sig = _sign(key, pae)
        bundle = {
            "mediaType": "application/vnd.dev.sigstore.bundle.v0.3+json",
            "verificationMaterial": {
                "certificate": {"rawBytes": _b64(cert.public_bytes(serialization.Encoding.DER))},
                "tlogEntries": [self._entry(cert, payload, sig, int(now.timestamp()))],
            },
            "dsseEnvelope": {
                "payload": _b64(payload),
                "payloadType": PAYLOAD_TYPE,
                "signatures": [{"sig": _b64(sig), "keyid": ""}],
            },
        }
        signature.write_text(json.dumps(bundle))
