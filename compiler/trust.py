"""``weightSync.verify``: what a signed weight sync asks of the Job and of the cluster.

The Job gets the trust material (a public key, a certificate chain, or a Sigstore trust
configuration) from the user's Secret or ConfigMap, mounted read-only at ``VERIFY_DIR``
with that one key, and the flags that make ``standbyc weights sync`` verify each staged
generation with it before the swap (``compiler/weights/sync/verify.py``).
"""

from __future__ import annotations

from typing import Any

from compiler.spec import CertificateVerify, KeyVerify, TrustFile, Verify

VERIFY_DIR = "/etc/standbyc/verify"
VOLUME = "verify"
# weights sync's exit code for a refused signature: the Job fails at once on it, since a
# retry would fetch and refuse the same generation again. The command defines it
# (EXIT_REFUSED, compiler/commands/weights/exits.py, above this layer); a test holds the two
# equal.
REFUSED_EXIT = 8


def trust_file(verify: Verify) -> TrustFile:
    if isinstance(verify, KeyVerify):
        return verify.public_key
    if isinstance(verify, CertificateVerify):
        return verify.certificate_chain
    return verify.trust_root


def job_args(verify: Verify) -> list[str]:
    args = ["--verify", verify.type, "--verify-trust", f"{VERIFY_DIR}/{trust_file(verify).key}"]
    if not isinstance(verify, KeyVerify):
        args += ["--verify-identity", verify.identity]
    if verify.type == "sigstore":
        args += ["--verify-issuer", verify.issuer]
    return args


def volume(verify: Verify) -> dict[str, Any]:
    f = trust_file(verify)
    items = [{"key": f.key, "path": f.key}]
    if f.secret_name is not None:
        return {"name": VOLUME, "secret": {"secretName": f.secret_name, "items": items}}
    return {"name": VOLUME, "configMap": {"name": f.config_map_name, "items": items}}


def _source(namespace: str, f: TrustFile) -> str:
    if f.secret_name is not None:
        return f"Secret {namespace}/{f.secret_name}"
    return f"ConfigMap {namespace}/{f.config_map_name}"


def requirement(namespace: str, verify: Verify) -> str:
    """The requires line: what the user provides, and what the publisher must do."""
    f = trust_file(verify)
    what = {
        "key": "the PEM public key of the publisher's signing key",
        "certificate": "the PEM certificate chain (your root, and intermediates) that the "
        f"signing certificate, issued to {getattr(verify, 'identity', '')}, chains to",
        "sigstore": "a Sigstore trust configuration (ClientTrustConfig JSON) for "
        f"{getattr(verify, 'identity', '')} from {getattr(verify, 'issuer', '')}",
    }[verify.type]
    return (
        f"{_source(namespace, f)} with the key {f.key}: {what}; every generation signed "
        "(standbyc weights publish --sign-key, or model.sig and standbyc-generation.json "
        f"written by your pipeline), or the Jobs refuse it (exit {REFUSED_EXIT}, "
        "StandbyWeightsRefused)"
    )
