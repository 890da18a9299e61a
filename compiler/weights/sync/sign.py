"""``weights publish --sign-key``: sign a model directory as one generation.

The directory gets ``standbyc-generation.json`` (the generation) and ``model.sig`` (the
model-signing library's signature of every file, that one included), as
``model_signing sign`` would write it; publish then stores both like any other file, so
the signature travels with the generation through every route a standby may take (an
anchor, one-step or merged deltas, byte patches): each rebuilds exactly the signed bytes.

- With ``--sign-key`` (an EC private key, and for a certificate chain ``--sign-cert`` and
  ``--sign-chain``): a ``model.sig`` already there that this key made for this generation
  and these files is kept (publishing again changes nothing), otherwise the directory is
  signed again. Files publish leaves out (``--exclude``) are left out of the signature too.
- Without it, a ``model.sig`` the training pipeline wrote is kept, if it binds the
  generation: its signed marker must say it. That pipeline writes the marker before it
  signs, ``echo '{"format": "standbyc-generation", "generation": 42}' >
  DIR/standbyc-generation.json``. Whether the signature verifies is each standby's check.
"""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from compiler.fsutil import fsync_path
from compiler.weights.sync.errors import SignatureRefused, StoreError
from compiler.weights.sync.keys import check_signing_key
from compiler.weights.sync.modeldir import _excluded, scan
from compiler.weights.sync.signed import (
    MARKER,
    SIGNATURE,
    Trust,
    marker_bytes,
    read_bundle,
    read_marker,
)
from compiler.weights.sync.verify import check

HASHES = ("blake3", "sha256")
TMP = ".standbyc-sign-tmp"


@dataclass(frozen=True)
class Signer:
    key: Path  # PEM, EC P-256, P-384 or P-521, unencrypted
    certificate: Path | None = None  # the signing certificate (its public key is the key's)
    chain: tuple[Path, ...] = ()  # the certificates above it
    hash: str = "blake3"  # what the signature hashes each file with
    model: str = ""  # the model it signs a generation of (the spec's model.name)

    def describe(self) -> str:
        return f"the key {self.key}" + (f" and {self.certificate}" if self.certificate else "")


def prepare(
    directory: Path,
    generation: int,
    signer: Signer | None,
    excludes: Sequence[str],
    model: str = "",
) -> dict[str, Any]:
    """Sign ``directory`` as ``generation`` of ``model`` (or keep its signature, which must
    say the same); what was done."""
    sig = directory / SIGNATURE
    if not directory.is_dir():
        if signer is not None:
            raise StoreError(f"{directory}: --sign-key signs a model directory, not a file")
        return {"how": "unsigned"}
    if signer is None:
        if not sig.exists():
            return {"how": "unsigned"}
        _check_binding(directory, generation, excludes, model)
        return {"how": "kept", "by": "the directory's own model.sig"}
    _check_signer(signer)
    names = _published(directory, excludes)
    if sig.is_file() and _made_by(directory, generation, signer, names):
        return {"how": "kept", "by": signer.describe()}
    _sign(directory, generation, signer, excludes)
    return {"how": "signed", "by": signer.describe(), "hash": signer.hash}


def _check_signer(signer: Signer) -> None:
    if signer.hash not in HASHES:
        raise StoreError(f"--sign-hash {signer.hash}: one of {', '.join(HASHES)}")
    if signer.chain and signer.certificate is None:
        raise StoreError("--sign-chain needs --sign-cert")
    for path in (signer.key, signer.certificate, *signer.chain):
        if path is not None and not path.is_file():
            raise StoreError(f"{path}: no such file")
    check_signing_key(signer.key)


def _published(directory: Path, excludes: Sequence[str]) -> set[str]:
    model = scan(directory, excludes=excludes)
    return {f.name for f in (*model.weight_files, *model.files)}


def _check_binding(
    directory: Path, generation: int, excludes: Sequence[str], model: str = ""
) -> None:
    """A pipeline's own signature: it must bind this generation and cover what is
    published, or every standby would refuse it."""
    sig = directory / SIGNATURE
    try:
        bundle = read_bundle(sig)
    except SignatureRefused as exc:
        raise StoreError(str(exc)) from None
    if MARKER not in bundle.files or not (directory / MARKER).is_file():
        raise StoreError(
            f"{sig}: it does not sign {MARKER}, so it binds no generation: write "
            f"{marker_bytes(generation, model).decode().strip()} to {directory / MARKER} before "
            "signing (or publish with --sign-key)"
        )
    marker = read_marker(directory / MARKER)
    if marker.generation != generation:
        raise StoreError(
            f"{sig}: signed as generation {marker.generation}, published as {generation}: "
            "standbys would refuse it"
        )
    if model and marker.model != model:
        raise StoreError(
            f"{sig}: signed as a generation of {marker.model or 'no model'}, published as one "
            f"of {model}: standbys that verify the model would refuse it"
        )
    unsigned = sorted(_published(directory, excludes) - bundle.files - {SIGNATURE})
    if unsigned:
        raise StoreError(
            f"{sig}: does not sign {unsigned[0]}, which would be published: standbys "
            "would refuse it (sign after every file is written, or --exclude it)"
        )


def _made_by(directory: Path, generation: int, signer: Signer, names: set[str]) -> bool:
    """Whether ``model.sig`` is this signer's, for this generation and these files."""
    from cryptography import x509  # noqa: PLC0415 - with model_signing's dependencies
    from cryptography.hazmat.primitives import serialization  # noqa: PLC0415

    key = serialization.load_pem_private_key(signer.key.read_bytes(), None)
    pem = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    with tempfile.TemporaryDirectory(prefix="standbyc-sign-") as tmp:
        public = Path(tmp) / "key.pub"
        public.write_bytes(pem)
        try:
            check(directory, generation, Trust("key", public, model=signer.model), names)
        except (SignatureRefused, StoreError):
            return False
    if signer.certificate is None:
        return True
    leaf = read_bundle(directory / SIGNATURE).leaf
    cert = x509.load_pem_x509_certificate(signer.certificate.read_bytes())
    return leaf == cert.public_bytes(serialization.Encoding.DER)


def _ignored(directory: Path, excludes: Sequence[str]) -> list[str]:
    """What publish leaves out, as model-signing's ignored paths (a directory whole)."""
    out: list[str] = [SIGNATURE]
    for root, dirs, files in os.walk(directory):
        rel = os.path.relpath(root, directory)
        for name in sorted([*dirs, *files]):
            path = name if rel == "." else f"{rel}/{name}"
            if _excluded(path, excludes):
                out.append(path)
        dirs[:] = [d for d in dirs if (d if rel == "." else f"{rel}/{d}") not in out]
    return out


def _write(path: Path, data: bytes) -> None:
    tmp = path.with_name(f".{path.name}{TMP}")
    with tmp.open("wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())
    tmp.replace(path)


def _sign(directory: Path, generation: int, signer: Signer, excludes: Sequence[str]) -> None:
    from model_signing import hashing, signing  # noqa: PLC0415 - slow import, signing only

    for leftover in directory.glob(f".*{TMP}"):
        leftover.unlink()
    try:
        _write(directory / MARKER, marker_bytes(generation, signer.model))
    except OSError as exc:
        raise StoreError(
            f"{directory}: cannot write {MARKER} and {SIGNATURE} there ({exc.strerror}); "
            "publish --sign-key signs in place, as model_signing sign does"
        ) from None
    # Links inside the directory are published as the files they point to (modeldir.scan
    # refuses any that leave it), so they are signed as those files.
    hashes = hashing.Config().set_ignored_paths(
        paths=_ignored(directory, excludes), ignore_git_paths=False
    )
    algorithm: Literal["blake3", "sha256"] = "blake3" if signer.hash == "blake3" else "sha256"
    hashes.use_file_serialization(hashing_algorithm=algorithm).set_allow_symlinks(True)
    config = signing.Config().set_hashing_config(hashes)
    if signer.certificate is None:
        config.use_elliptic_key_signer(private_key=signer.key)
    else:
        config.use_certificate_signer(
            private_key=signer.key,
            signing_certificate=signer.certificate,
            certificate_chain=signer.chain,
        )
    tmp = directory / f".{SIGNATURE}{TMP}"
    with contextlib.redirect_stdout(io.StringIO()):
        try:
            config.sign(directory, tmp)
        except Exception as exc:  # the library's errors have no common base
            tmp.unlink(missing_ok=True)
            raise StoreError(f"{directory}: signing failed: {type(exc).__name__}: {exc}") from None
    fsync_path(tmp)
    tmp.replace(directory / SIGNATURE)
    fsync_path(directory)
