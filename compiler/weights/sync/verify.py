"""``weights sync --verify``: only a generation its publisher signed is swapped in.

The staged directory (``work/next``, every file rebuilt, linked or downloaded, and checked
against the index) is verified before the swap, from its own bytes: the store and its
index stay untrusted, since whoever can write one can write the other. Verified means

1. ``model.sig`` is there, and the model-signing library verifies it with the trust
   (a public key; a certificate chain; a Sigstore identity and issuer) and finds every
   file it lists with the digest it lists (``signed.library_verify``);
2. the directory holds exactly the files the signature lists, and ``model.sig``;
3. the signed ``standbyc-generation.json`` says the generation asked for (a signature of
   another generation, replayed, says another one);
4. with a certificate chain, the signing certificate carries the identity asked for.

Anything else is ``SignatureRefused`` (exit 8): the sync stops before the swap, so the old
directory stays as it was and no engine is asked to load anything.

``verify.json`` beside ``state.json`` remembers, for the report and the next sync, the last
generation refused (0: none) and the directory last verified (its files' names, sizes,
mtimes and inodes, and the trust's fingerprint): a sync that finds the directory already
at the generation does not hash it again while it is unchanged. ctime is left out: the
next sync's hard links change it on files it keeps, not their bytes.
"""

from __future__ import annotations

import contextlib
import json
import multiprocessing as mp
import shutil
import time
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures.process import BrokenProcessPool
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler.fsutil import read_regular, write_replacing
from compiler.weights.sync.errors import SignatureRefused, StoreError
from compiler.weights.sync.signed import (
    MARKER,
    SIGNATURE,
    Trust,
    certificate_identities,
    directory_files,
    library_verify,
    read_bundle,
    read_marker,
)
from compiler.weights.sync.standby import STATE_CAP, StandbyDir

STATE = "verify.json"
STATE_FORMAT = "standbyc-verify-state"
STATE_VERSION = 1


def check(
    directory: Path, generation: int, trust: Trust, files: set[str] | None = None
) -> dict[str, Any]:
    """Verify ``directory`` as ``generation`` under ``trust``; what the signature covers,
    or SignatureRefused naming what failed. ``files``: the names that must all be signed
    (default: every file in the directory)."""
    t0 = time.perf_counter()
    sig = directory / SIGNATURE
    if not sig.is_file():
        raise SignatureRefused(
            f"generation {generation} has no {SIGNATURE}: it is not signed (or its signature "
            f"was removed), and {trust.describe()} is required"
        )
    bundle = read_bundle(sig)  # before the library: a malformed bundle gets a clear message
    library_verify(directory, trust, bundle)
    have = (directory_files(directory) if files is None else files) - {SIGNATURE}
    unsigned = sorted(have - bundle.files)
    if unsigned:
        raise SignatureRefused(
            f"{unsigned[0]} is not covered by the signature"
            + (f" (and {len(unsigned) - 1} more)" if len(unsigned) > 1 else "")
            + ": a file added after signing, or one the signer left out (model_signing "
            "leaves out git files unless told otherwise)"
        )
    if MARKER not in bundle.files:
        raise SignatureRefused(
            f"the signature does not cover {MARKER}, so it binds no generation: sign the "
            f"directory after writing {MARKER} (`standbyc weights publish --sign-key` does)"
        )
    try:
        marker = read_marker(directory / MARKER)
    except StoreError as exc:
        raise SignatureRefused(str(exc)) from None
    signed = marker.generation
    if signed != generation:
        raise SignatureRefused(
            f"the signature is of generation {signed}, not {generation}: a signed generation "
            "replayed under another number"
        )
    if trust.model and marker.model != trust.model:
        raise SignatureRefused(
            f"the signature is of model {marker.model!r}, not {trust.model!r}: another "
            "model's signed generation, published into this store"
            if marker.model
            else f"the signature binds no model, and {trust.model!r} is required: sign it "
            f"again with publish --sign-key --model {trust.model}"
        )
    if trust.mode == "certificate":
        _check_identity(bundle.leaf, trust)
    return {
        "generation": signed,
        "model": marker.model,
        "trust": trust.describe(),
        **bundle.to_json(),
        "seconds": round(time.perf_counter() - t0, 3),
    }


def _check_identity(leaf: bytes | None, trust: Trust) -> None:
    if leaf is None:
        raise SignatureRefused("the signature carries no signing certificate")
    try:
        found = certificate_identities(leaf)
    except ValueError as exc:  # not a certificate: the library had no use for it
        raise SignatureRefused(f"the bundle's signing certificate does not parse ({exc})") from None
    if trust.identity not in found:
        raise SignatureRefused(
            f"the signing certificate is for {', '.join(found) or 'no identity'}, not "
            f"{trust.identity}"
        )


def _files(directory: Path) -> list[list[Any]]:
    """Every file as it looks now: name, size, mtime, inode (not ctime: see above)."""
    out = []
    for name in sorted(directory_files(directory)):
        st = (directory / name).lstat()
        out.append([name, st.st_size, st.st_mtime_ns, st.st_ino])
    return out


@dataclass
class Verifier:
    """Verification for one target's syncs, with its record in ``verify.json``."""

    trust: Trust
    _worker: ProcessPoolExecutor | None = None

    def prefetch(self) -> None:
        """Fork the process that will verify, and have it import the model-signing library
        (sigstore and its models under it: about 0.4 s of CPU, paid by every signed sync)
        while this one downloads and rebuilds. A process, not a thread: the rebuild holds
        the GIL between its numpy calls, and an import beside it in a thread would slow
        it by as much as the import saves; the rebuild leaves part of a second core idle."""
        if self._worker is None and "fork" in mp.get_all_start_methods():
            self._worker = ProcessPoolExecutor(
                1, mp_context=mp.get_context("fork"), initializer=_import_library
            )
            self._worker.submit(int)  # fork it now, not when check() needs it

    def _verified(self, directory: Path, generation: int) -> dict[str, Any]:
        """``check()``, in the prefetched process when there is one (else here)."""
        worker, self._worker = self._worker, None
        if worker is not None:
            try:
                result: dict[str, Any] = worker.submit(
                    check, directory, generation, self.trust
                ).result()
                return result
            except BrokenProcessPool:
                pass  # the process died (killed, out of memory): verify here
            finally:
                worker.shutdown()
        return check(directory, generation, self.trust)

    def check(self, local: StandbyDir, directory: Path, generation: int) -> dict[str, Any]:
        """Verify ``directory`` (the staged one, or the target itself when it already
        holds the generation), record the outcome, and refuse what fails."""
        fingerprint = self.trust.fingerprint()
        state = read_state(local)
        last = state.get("verified") or {}
        if (
            directory == local.target
            and last.get("generation") == generation
            and last.get("trust") == fingerprint
            and last.get("files") == _files(directory)
        ):
            self._write(local, 0, "", last)
            return {"generation": generation, "trust": self.trust.describe(), "cached": True}
        try:
            done = self._verified(directory, generation)
        except SignatureRefused as exc:
            self._write(local, generation, str(exc), last)
            if directory != local.target:  # the staged one: gone before anything else
                shutil.rmtree(directory, ignore_errors=True)
                local.restamp()
            raise SignatureRefused(
                f"{local.target}: generation {generation} refused: {exc}. The directory keeps "
                "what it held, and no engine was asked to load anything"
            ) from None
        record = {"generation": generation, "trust": fingerprint, "files": _files(directory)}
        self._write(local, 0, "", record)
        return done

    @staticmethod
    def _write(local: StandbyDir, refused: int, reason: str, verified: dict[str, Any]) -> None:
        doc = {
            "format": STATE_FORMAT,
            "version": STATE_VERSION,
            "refused": refused,
            "reason": reason,
            "verified": verified or None,
        }
        local.state.mkdir(parents=True, exist_ok=True)
        write_replacing(local.state / STATE, (json.dumps(doc, sort_keys=True) + "\n").encode())


def _import_library() -> None:
    with contextlib.suppress(ImportError):  # then check() says so
        import model_signing.verifying  # noqa: F401, PLC0415


def read_state(local: StandbyDir) -> dict[str, Any]:
    data = read_regular(local.state / STATE, STATE_CAP)  # never through a link or a FIFO
    try:
        doc = json.loads(data) if data is not None else {}
    except ValueError:
        return {}
    ok = isinstance(doc, dict) and (doc.get("format"), doc.get("version")) == (
        STATE_FORMAT,
        STATE_VERSION,
    )
    return doc if ok else {}


def refused_generation(target: Path) -> int | None:
    """The generation the last verifying sync of ``target`` refused (0: it refused none);
    None when no sync of it verified anything. For the report."""
    doc = read_state(StandbyDir(target))
    refused = doc.get("refused")
    return refused if type(refused) is int else None
