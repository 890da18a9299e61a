"""Engines that answer what no engine would: the Job's reload must end each within its
bound, call none of them loaded, and read no more than a small answer.

Hostile pods run in this process, each on its own loopback address: a catch-all 200
``{}``, a 200 HTML page, a 200 whose body is 200 MB, a well-formed answer dripped one
byte every 0.1 s, a header line that never ends, and pods that accept and never answer.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.sync.conftest import Nginx, free_port, with_arg
from tests.sync.reload.conftest import Seeds, compiled_tier, outcomes

ENGINES = {  # api -> (compiled spec directory, tier)
    "sglang": ("inference-system/inference-engine", "hot"),
    "vllm": ("serving/engine-reload", "hot"),
    "triton": ("serving/engine-reload", "warm"),
}
# What each engine's first request would be answered with, well-formed.
FIRST = {
    "sglang": {"model_path": "/m", "weight_version": "41"},
    "vllm": {"version": "0.34.0"},
    "triton": {"name": "llama", "parameters": {}},
}


def _serve(address: str, port: int, answer: Any) -> socket.socket:
    """Accept connections on address:port; ``answer(conn)`` writes whatever it writes."""
    sock = socket.create_server((address, port), backlog=64)

    def loop() -> None:
        while True:
            try:
                conn, _ = sock.accept()
            except OSError:
                return
            threading.Thread(target=_answer, args=(conn, answer), daemon=True).start()

    threading.Thread(target=loop, daemon=True).start()
    return sock


def _answer(conn: socket.socket, answer: Any) -> None:
    try:
        conn.recv(65536)
        answer(conn)
    except OSError:
        pass
    finally:
        conn.close()


def _http(status: int, body: bytes, ctype: str = "application/json") -> bytes:
    return (f"HTTP/1.1 {status} OK\r\nContent-Type: {ctype}\r\nContent-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n").encode() + body  # fmt: skip


def _huge(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                 b"Content-Length: 209715200\r\n\r\n")  # fmt: skip
    chunk = b"[" + b"0," * 32767
    for _ in range(3200):
        conn.sendall(chunk)


def _endless_header(conn: socket.socket) -> None:
    conn.sendall(b"HTTP/1.1 200 OK\r\nX-Forever: ")
    for _ in range(100_000):
        conn.sendall(b"a" * 1024)


def _drip(api: str) -> Any:
    def drip(conn: socket.socket) -> None:
        for byte in _http(200, json.dumps(FIRST[api]).encode()):
            conn.sendall(bytes([byte]))
            time.sleep(0.1)

    return drip


def _silent(conn: socket.socket) -> None:
    time.sleep(120)


FAULTS = {
    "catch-all {}": lambda api: lambda c: c.sendall(_http(200, b"{}")),
    "HTML": lambda api: lambda c: c.sendall(_http(200, b"<html>ok</html>", "text/html")),
    "200 MB": lambda api: _huge,
    "drip": _drip,
    "endless header": lambda api: _endless_header,
}


@pytest.fixture
def hostile() -> Iterator[Any]:
    socks: list[socket.socket] = []

    def start(address: str, port: int, answer: Any) -> None:
        socks.append(_serve(address, port, answer))

    yield start
    for s in socks:
        s.close()


# Answers of the wrong shape, for every engine (each checks its own shapes); faults of the
# wire itself, for one (the same bounded request is under every engine).
CASES = [(api, f) for api in ENGINES for f in ("catch-all {}", "HTML")] + [
    ("vllm", f) for f in ("200 MB", "drip", "endless header")
]


@pytest.mark.parametrize(("api", "fault"), CASES)
def test_a_hostile_pod_is_never_loaded_and_ends_within_its_bound(
    api: str, fault: str, *, seeds: Seeds, nginx: Nginx, compiled: Path, case_out: Path,
    tmp_path: Path, hostile: Any,
) -> None:  # fmt: skip
    spec_dir, tier_name = ENGINES[api]
    out = compiled if spec_dir.startswith("inference-system") else case_out
    port = free_port()
    tier = compiled_tier(out, spec_dir, tier_name, seeds, nginx, tmp_path, port=port,
                         addresses=("127.0.0.2",))  # fmt: skip
    hostile("127.0.0.2", port, FAULTS[fault](api))
    cmd = with_arg(with_arg(tier.cmd, "--reload-timeout", "5"), "--expect-pods", "1")
    started = time.monotonic()
    code, doc, err = tier.run(cmd)
    took = time.monotonic() - started
    assert code == 5, err
    assert outcomes(doc)["127.0.0.2"] in ("refused", "timed out", "unreachable"), doc
    assert doc["reload"]["served_generation"] is None
    assert doc["reload"]["seconds"] < 5 + 2, doc["reload"]  # one probe's bound, and a little
    assert took < 60


def test_a_hundred_pods_that_never_answer_take_one_probe_bound(
    *, seeds: Seeds, nginx: Nginx, case_out: Path, tmp_path: Path, hostile: Any
) -> None:
    port = free_port()
    addresses = tuple(f"127.0.1.{i}" for i in range(1, 101))
    tier = compiled_tier(case_out, "serving/engine-reload", "hot", seeds, nginx, tmp_path,
                         port=port, addresses=addresses)  # fmt: skip
    for address in addresses:
        hostile(address, port, _silent)
    cmd = with_arg(with_arg(tier.cmd, "--reload-timeout", "3"), "--expect-pods", "100")
    code, doc, err = tier.run(cmd)
    assert code == 5, err
    assert set(outcomes(doc).values()) == {"timed out"}
    # 100 pods asked what they serve 64 at a time: two rounds of one 3 s request each
    assert doc["reload"]["seconds"] < 2 * 3 + 3, doc["reload"]["seconds"]
