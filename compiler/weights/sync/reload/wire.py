"""One request to one engine pod, bounded as a whole.

An engine's answer is trusted no more than the store's files are: its whole answer
(connect, send, status line, headers, body) must arrive within one deadline, its body is
read to a small cap. ``http.client`` parses;
the socket beneath it checks the deadline before every receive, so an answer that drips
one byte at a time ends at the deadline, not at the deadline per byte.
"""

from __future__ import annotations

import http.client
import io
import json
import socket
import time
from dataclasses import dataclass
from typing import Any

ANSWER_CAP = 1 << 20  # an engine's answers are small JSON documents (a model config at most)


class Refused(Exception):
    """The pod answered, and the answer is not what a successful step answers."""


class _Deadline:
    def __init__(self, seconds: float) -> None:
        self.until = time.monotonic() + seconds

    def remaining(self) -> float:
        left = self.until - time.monotonic()
        if left <= 0:
            raise TimeoutError
        return left


class _Raw(io.RawIOBase):
    """The socket's bytes, each receive within what is left of the deadline."""

    def __init__(self, sock: socket.socket, deadline: _Deadline) -> None:
        self.sock, self.deadline = sock, deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        self.sock.settimeout(self.deadline.remaining())
        return self.sock.recv_into(buffer)


class _Socket:
    """What ``http.client`` needs of a socket, with the deadline inside."""

    def __init__(self, sock: socket.socket, deadline: _Deadline) -> None:
        self.sock, self.deadline = sock, deadline

    def sendall(self, data: bytes) -> None:
        view = memoryview(data)
        while view:
            self.sock.settimeout(self.deadline.remaining())
            view = view[self.sock.send(view) :]

    def makefile(self, mode: str, *args: Any, **kwargs: Any) -> io.BufferedReader:
        return io.BufferedReader(_Raw(self.sock, self.deadline))

    def close(self) -> None:
        self.sock.close()


class _Connection(http.client.HTTPConnection):
    def __init__(self, host: str, port: int, deadline: _Deadline) -> None:
        super().__init__(host, port)
        self.deadline = deadline

    def connect(self) -> None:
        sock = socket.create_connection((self.host, self.port), self.deadline.remaining())
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.sock = _Socket(sock, self.deadline)


@dataclass(frozen=True)
class Answer:
    status: int
    body: Any  # the JSON document; None for an empty body; the text when it is not JSON
    json: bool

    def why(self) -> str:
        """The engine's own words for a refusal, short."""
        doc = self.body
        if isinstance(doc, dict):
            for key in ("message", "error", "detail"):
                if doc.get(key):
                    return f"HTTP {self.status}: {str(doc[key])[:300]}"
        text = "" if doc is None else (json.dumps(doc) if self.json else str(doc))
        return f"HTTP {self.status}: {text[:300]}" if text else f"HTTP {self.status}"


@dataclass(frozen=True)
class Pod:
    """One engine pod: its address and the engines' API port."""

    address: str
    port: int

    def request(self, method: str, path: str, *, seconds: float, body: Any = None) -> Answer:
        """``method path`` with a JSON ``body``; the whole answer within ``seconds``.

        TimeoutError when it does not come in time, OSError or http.client.HTTPException
        when the pod cannot be reached or speaks no HTTP, Refused when the body is over
        the cap."""
        deadline = _Deadline(seconds)
        conn = _Connection(self.address, self.port, deadline)
        try:
            payload = None if body is None else json.dumps(body).encode()
            headers = {"Content-Type": "application/json"} if payload is not None else {}
            conn.request(method, path, body=payload, headers=headers)
            resp = conn.getresponse()
            raw = resp.read(ANSWER_CAP + 1)
        finally:
            conn.close()
        if len(raw) > ANSWER_CAP:
            raise Refused(
                f"{method} {path}: HTTP {resp.status} with an answer over {ANSWER_CAP} bytes; "
                "an engine's answers are small JSON documents"
            )
        if not raw:
            return Answer(resp.status, None, False)
        try:
            return Answer(resp.status, json.loads(raw), True)
        except ValueError:
            return Answer(resp.status, raw.decode("utf-8", "replace")[:300], False)
