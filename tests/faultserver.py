"""A hostile HTTP server for the fault tests, on 127.0.0.1: it serves a store directory
as a static server would, except where a fault is set for a path (or for every path but
``index.json``).

Faults: ``416`` (every request answers 416), ``drip`` (one byte every ``drip_seconds``),
``endless`` (a body that never ends, chunked), ``reset`` (half the body, then the
connection is cut), ``wrong-range`` (a 206 whose Content-Range starts elsewhere),
``gzip`` (the body gzip-encoded though nobody asked), ``long`` (the file, then as many
bytes again under a Content-Length that says so). Every request is logged.
"""

from __future__ import annotations

import contextlib
import gzip
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

DATA = "data"  # a fault on this key applies to every path but index.json


@dataclass
class FaultServer:
    root: Path
    faults: dict[str, str] = field(default_factory=dict)  # path (or DATA) -> fault
    drip_seconds: float = 0.2
    log: list[dict[str, Any]] = field(default_factory=list)
    server: ThreadingHTTPServer | None = None

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def fault(self, path: str) -> str | None:
        if path in self.faults:
            return self.faults[path]
        return self.faults.get(DATA) if path != "index.json" else None

    def start(self) -> FaultServer:
        self.server = _Quiet(("127.0.0.1", 0), _handler(self))
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def requests(self, path: str | None = None) -> list[dict[str, Any]]:
        return [r for r in self.log if path is None or r["path"] == path]


class _Quiet(ThreadingHTTPServer):
    """A client that hangs up is what these tests do to it: nothing to print."""

    def handle_error(self, request: Any, client_address: Any) -> None:
        pass


def _handler(fs: FaultServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            path = self.path.lstrip("/")
            fault = fs.fault(path)
            fs.log.append({"path": path, "range": self.headers.get("Range"), "fault": fault})
            file = fs.root / path
            if not file.is_file():
                self._send(404, b"not found")
                return
            data = file.read_bytes()
            start = _range_start(self.headers.get("Range"))
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                self._serve(fault, data, start)

        def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
            self.send_response(status)
            for key, value in {"Content-Length": str(len(body)), **(headers or {})}.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(body)

        def _serve(self, fault: str | None, data: bytes, start: int) -> None:
            size = len(data)
            if fault == "416":
                self._send(416, b"", {"Content-Range": f"bytes */{size}"})
            elif fault == "drip":
                self.send_response(200)
                self.send_header("Content-Length", str(size))
                self.end_headers()
                for i in range(size):
                    self.wfile.write(data[i : i + 1])
                    self.wfile.flush()
                    time.sleep(fs.drip_seconds)
            elif fault == "endless":
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                block = b"\0" * 65536
                while True:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(block), block))
            elif fault == "reset":
                self.send_response(200)
                self.send_header("Content-Length", str(size))
                self.end_headers()
                self.wfile.write(data[: size // 2])
                self.wfile.flush()
                self.close_connection = True
                self.connection.shutdown(2)
            elif fault == "wrong-range" and start:
                body = data[start - 1 :]
                headers = {"Content-Range": f"bytes {start - 1}-{size - 1}/{size}"}
                self._send(206, body, headers)
            elif fault == "gzip":
                self._send(200, gzip.compress(data), {"Content-Encoding": "gzip"})
            elif fault == "long":
                self._send(200, data + data)
            elif start:
                headers = {"Content-Range": f"bytes {start}-{size - 1}/{size}"}
                self._send(206, data[start:], headers)
            else:
                self._send(200, data)

    return Handler


def _range_start(header: str | None) -> int:
    if not header or not header.startswith("bytes="):
        return 0
    try:
        return int(header[6:].split("-", 1)[0])
    except ValueError:
        return 0
