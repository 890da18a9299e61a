"""A throwaway local control plane: one etcd and one kube-apiserver per Kubernetes version.

Nothing here reaches a cluster of the user's. Everything listens on 127.0.0.1, lives in a
temporary directory and goes when the ``ControlPlane`` closes. One etcd serves every
API server, each under its own key prefix, and each API server emulates one Kubernetes
minor (``--emulated-version``), so one pinned binary answers for the whole matrix.

The API servers run as the validators do, through ``compiler.tools``: no webhook, no
controller, a static token with every right (``--authorization-mode=AlwaysAllow``), and
``--endpoint-reconciler-type=none`` (1.37 refuses a loopback advertise address otherwise).
Service accounts need a signing key; a fresh P-256 key is written for each control plane.
Waiting for a server to be ready has a deadline, and missing it is an error: a slow
machine makes the gate fail loudly, never pass.
"""

from __future__ import annotations

import base64
import contextlib
import http.client
import json
import os
import secrets
import shutil
import socket
import ssl
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any

from compiler import tools
from compiler.errors import ToolFailed

ETCD = "etcd"
APISERVER = "kube-apiserver"
READY_WAIT = 180.0  # seconds a server may take to be ready on a loaded machine
REQUEST_WAIT = 120.0  # seconds one request may take
EMULATED_BACK = 3  # how many minors before its own an API server emulates (1.37: 1.34)

# The order of the NIST P-256 group: a private key is a scalar below it.
_P256_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551
_P256_OID = bytes.fromhex("06082a8648ce3d030107")


def ec_private_key_pem() -> str:
    """A fresh P-256 private key in SEC 1 form (RFC 5915, the public key left out: readers
    derive it), for the API server to sign service-account tokens with. Only the random
    scalar is needed, so no cryptography library is."""
    scalar = (1 + secrets.randbelow(_P256_ORDER - 1)).to_bytes(32, "big")
    body = b"\x02\x01\x01" + b"\x04\x20" + scalar + b"\xa0" + bytes([len(_P256_OID)]) + _P256_OID
    der = b"\x30" + bytes([len(body)]) + body
    text = base64.b64encode(der).decode()
    lines = [text[i : i + 64] for i in range(0, len(text), 64)]
    return "\n".join(["-----BEGIN EC PRIVATE KEY-----", *lines, "-----END EC PRIVATE KEY-----", ""])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def emulable(binary_minor: int, versions: Sequence[str]) -> tuple[list[str], list[str]]:
    """(the versions one API server of ``binary_minor`` emulates, those it cannot)."""
    ok: list[str] = []
    not_ok: list[str] = []
    for v in versions:
        major, minor = (int(p) for p in v.split(".")[:2])
        fits = major == 1 and binary_minor - EMULATED_BACK <= minor <= binary_minor
        (ok if fits else not_ok).append(v)
    return ok, not_ok


@dataclass(frozen=True)
class Response:
    status: int
    body: Any  # the decoded JSON (a Status object for a refusal)
    warnings: tuple[str, ...]  # the texts of the response's Warning headers


def _warning_text(header: str) -> str:
    """The text of one ``Warning: 299 - "text"`` header (RFC 7234 quoting undone)."""
    _, _, rest = header.partition(' - "')
    return rest.removesuffix('"').replace('\\"', '"').replace("\\\\", "\\") if rest else header


@dataclass
class ApiServer:
    """One running kube-apiserver, emulating Kubernetes ``version``."""

    version: str
    port: int
    token: str
    cert_dir: Path
    proc: subprocess.Popen[bytes] | None = None
    log: Path | None = None
    _local: threading.local = field(default_factory=threading.local)

    def _context(self) -> ssl.SSLContext:
        # The server's own self-signed certificate (written into cert_dir at start) is
        # the only one trusted.
        return ssl.create_default_context(cafile=str(self.cert_dir / "apiserver.crt"))

    def _connection(self) -> http.client.HTTPSConnection:
        conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = http.client.HTTPSConnection(
                "127.0.0.1", self.port, context=self._context(), timeout=REQUEST_WAIT
            )
            self._local.conn = conn
        return conn

    def _drop(self) -> None:
        conn: http.client.HTTPSConnection | None = getattr(self._local, "conn", None)
        if conn is not None:
            conn.close()
        self._local.conn = None

    def request(
        self, method: str, path: str, body: Any = None, content_type: str = "application/json"
    ) -> Response:
        """One request; a connection per thread, kept open between requests."""
        headers = {"Authorization": f"Bearer {self.token}", "Accept": "application/json"}
        data = None if body is None else json.dumps(body).encode()
        if data is not None:
            headers["Content-Type"] = content_type
        for attempt in (1, 2):  # a kept-alive connection the server closed: once more
            try:
                conn = self._connection()
                conn.request(method, path, body=data, headers=headers)
                reply = conn.getresponse()
                raw = reply.read()
            except (http.client.HTTPException, OSError) as exc:  # ssl.SSLError included
                self._drop()
                if attempt == 2:
                    raise ToolFailed(
                        f"kube-apiserver (emulating {self.version}) did not answer "
                        f"{method} {path}: {exc}"
                    ) from None
                continue
            warnings = tuple(_warning_text(w) for w in reply.headers.get_all("Warning") or ())
            decoded = json.loads(raw) if raw.strip().startswith(b"{") else raw.decode()
            return Response(reply.status, decoded, warnings)
        raise AssertionError("unreachable")


class ControlPlane:
    """etcd and one kube-apiserver per version, for as long as the ``with`` block runs."""

    def __init__(self, versions: Sequence[str]) -> None:
        self.versions = list(versions)
        self.servers: dict[str, ApiServer] = {}
        self._procs: list[subprocess.Popen[bytes]] = []
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self._lock = threading.Lock()  # _procs and _stopped, between its thread and stop()
        self._stopped = False

    def __enter__(self) -> ControlPlane:
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def stop(self) -> None:
        """Kill the servers now, from any thread: what waits on them (a start, a request)
        fails at once, and the thread that runs the plane closes it as usual."""
        with self._lock:
            self._stopped = True
            for proc in self._procs:
                if proc.poll() is None:
                    proc.kill()

    def start(self) -> None:
        with _LIVE_LOCK:
            _LIVE.add(self)
        remove_leftovers()
        self._tmp = tempfile.TemporaryDirectory(prefix=PREFIX)
        root = Path(self._tmp.name)
        (root / OWNER).write_text(f"{os.getpid()}\n")
        etcd_url = self._start_etcd(root)
        key = root / "service-account.key"
        key.write_text(ec_private_key_pem())
        token = secrets.token_hex(16)
        (root / "tokens.csv").write_text(f'{token},standbyc,standbyc,"system:masters"\n')
        for version in self.versions:
            self.servers[version] = self._start_apiserver(root, version, etcd_url, key, token)
        with ThreadPoolExecutor(max_workers=max(1, len(self.servers))) as pool:
            list(pool.map(self._wait_ready, self.servers.values()))

    def _spawn(self, name: str, args: list[str], log: Path) -> subprocess.Popen[bytes]:
        with self._lock:
            if self._stopped:
                raise ToolFailed(f"{name} not started: the run was stopped")
            proc = tools.start(name, args, log=log)
            self._procs.append(proc)
        return proc

    def _start_etcd(self, root: Path) -> str:
        client, peer = free_port(), free_port()
        url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
        log = root / "etcd.log"
        proc = self._spawn(ETCD, [
            "--name", "standbyc", "--data-dir", str(root / "etcd"),
            "--listen-client-urls", url, "--advertise-client-urls", url,
            "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
            "--initial-cluster", f"standbyc={peer_url}",
            # Thrown away at the end: nothing to keep across a crash.
            "--unsafe-no-fsync", "--log-level", "error",
        ], log)  # fmt: skip
        deadline = time.monotonic() + READY_WAIT
        while time.monotonic() < deadline:
            _exited(proc, ETCD, log)
            try:
                conn = http.client.HTTPConnection("127.0.0.1", client, timeout=5)
                conn.request("GET", "/health")
                if b'"health":"true"' in conn.getresponse().read():
                    return url
            except OSError:
                pass
            time.sleep(0.1)
        raise ToolFailed(f"etcd was not healthy within {READY_WAIT:g} s\n{_tail(log)}")

    def _start_apiserver(
        self, root: Path, version: str, etcd: str, key: Path, token: str
    ) -> ApiServer:
        port = free_port()
        cert_dir = root / f"certs-{version}"
        log = root / f"kube-apiserver-{version}.log"
        server = ApiServer(version, port, token, cert_dir, log=log)
        server.proc = self._spawn(APISERVER, [
            "--etcd-servers", etcd, "--etcd-prefix", f"/registry-{version}",
            "--bind-address", "127.0.0.1", "--advertise-address", "127.0.0.1",
            "--secure-port", str(port), "--cert-dir", str(cert_dir),
            "--token-auth-file", str(root / "tokens.csv"),
            "--authorization-mode", "AlwaysAllow",
            "--service-account-issuer", "https://standbyc.invalid",
            "--service-account-key-file", str(key),
            "--service-account-signing-key-file", str(key),
            "--service-cluster-ip-range", "10.96.0.0/24",
            "--endpoint-reconciler-type", "none",
            "--emulated-version", f"kube={version}",
        ], log)  # fmt: skip
        return server

    def _wait_ready(self, server: ApiServer) -> None:
        assert server.proc is not None and server.log is not None
        deadline = time.monotonic() + READY_WAIT
        while time.monotonic() < deadline:
            _exited(server.proc, APISERVER, server.log)
            if (server.cert_dir / "apiserver.crt").is_file():
                try:
                    if server.request("GET", "/readyz").status == 200:
                        return
                except ToolFailed:
                    pass
            time.sleep(0.2)
        raise ToolFailed(
            f"kube-apiserver (emulating {server.version}) was not ready within "
            f"{READY_WAIT:g} s\n{_tail(server.log)}"
        )

    def close(self) -> None:
        # Killed, not stopped: nothing they hold is kept, and kube-apiserver's graceful
        # shutdown takes seconds.
        self.stop()
        for proc in self._procs:
            proc.wait()
        self._procs.clear()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None
        with _LIVE_LOCK:
            _LIVE.discard(self)


# The control planes of this process that run now, for ``stop_all``.
_LIVE: set[ControlPlane] = set()
_LIVE_LOCK = threading.Lock()


def stop_all() -> None:
    """Kill the servers of every control plane of this process. Ctrl-C and SIGTERM reach
    the main thread while a plane runs in another (the gate's API server step), whose
    requests would otherwise wait on servers the same Ctrl-C took down with them."""
    with _LIVE_LOCK:
        planes = list(_LIVE)
    for plane in planes:
        plane.stop()


PREFIX = "standbyc-controlplane-"
LEFTOVER_AGE = 60.0  # seconds an ownerless directory may be someone's, still being made
OWNER = "owner.pid"  # the standbyc process a control plane's directory belongs to


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's: alive, and not ours to judge
        return True
    return True


def remove_leftovers(parent: Path | None = None) -> list[Path]:
    """Remove what a killed standbyc left of its control planes: each directory whose
    owner is gone (its servers died with it: ``tools.start``). Returns what went."""
    where = Path(parent or tempfile.gettempdir())
    gone = []
    for directory in where.glob(f"{PREFIX}*"):
        try:
            pid = int((directory / OWNER).read_text().strip())
        except (OSError, ValueError):
            # Emptied by a cleanup that was cut short, a while ago (one another standbyc
            # has just made has no owner yet, and is left alone).
            with contextlib.suppress(OSError):
                if time.time() - directory.stat().st_mtime > LEFTOVER_AGE:
                    directory.rmdir()
                    gone.append(directory)
            continue
        if pid != os.getpid() and not _alive(pid):
            shutil.rmtree(directory, ignore_errors=True)
            gone.append(directory)
    return gone


def _exited(proc: subprocess.Popen[bytes], name: str, log: Path) -> None:
    if proc.poll() is not None:
        raise ToolFailed(f"{name} exited with {proc.returncode} while starting\n{_tail(log)}")


def _tail(log: Path, lines: int = 15) -> str:
    try:
        text = log.read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join("    " + line for line in text.strip().splitlines()[-lines:])
