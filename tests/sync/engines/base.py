"""What the tests' engines share: a model loaded the way transformers-based engines load
one, a reader-writer lock, the request log, and a small HTTP server.

Each engine (``sglang``, ``vllm``, ``triton``) is its own module with its own routes,
answer shapes and state machine, read from that engine's released source (cited there).
What they share here is what none of them decides: the weights (``AutoModelForCausalLM``
on a model directory, so "what the pod serves" is the log-probabilities it computes) and
the plumbing.

Every request is logged to ``--log`` as a JSON line when it arrives (``at``) and again
when it is answered (``done``, with the status), so a test can tell which loads ran at
the same time.
"""

from __future__ import annotations

import argparse
import json
import sys
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from tests.sync import hfmodel

# The pods of one process share torch; loading and computing one at a time keeps
# transformers' loader (not safe across threads) and the arithmetic out of each other's way.
TORCH = threading.Lock()


class Weights:
    """A model directory loaded into memory, and what it answers for a prompt."""

    def __init__(self, path: str) -> None:
        import torch  # noqa: PLC0415
        from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

        self.torch = torch
        self.path = path
        with TORCH:
            self.tokenizer = AutoTokenizer.from_pretrained(path)
            self.model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.bfloat16)
            self.model.eval()

    def logprobs(self, text: str) -> list[list[Any]]:
        """``[[logprob, token_id, None], ...]`` for each prompt token (the first: None)."""
        # One thread, set in the thread that computes (OpenMP keeps it per thread): the
        # same arithmetic, so the same bits, in every pod and in the reference.
        with TORCH:
            self.torch.set_num_threads(1)
            ids = self.tokenizer(text)["input_ids"]
            with self.torch.no_grad():
                logits = self.model(input_ids=self.torch.tensor([ids])).logits[0]
            logprobs = self.torch.log_softmax(logits.float(), dim=-1)
        return [[None, ids[0], None]] + [
            [float(logprobs[i - 1, t]), t, None] for i, t in enumerate(ids) if i
        ]

    def checksums(self) -> dict[str, str]:
        import hashlib  # noqa: PLC0415

        with TORCH:
            return {
                name: hashlib.sha256(p.detach().float().numpy().tobytes()).hexdigest()
                for name, p in self.model.named_parameters()
            }


class RWLock:
    """Many readers (requests), or one writer (a weight update) that new readers wait for."""

    def __init__(self) -> None:
        self.cond = threading.Condition()
        self.readers = 0
        self.writer = False

    def acquire_read(self, timeout: float | None = None) -> bool:
        with self.cond:
            ok = self.cond.wait_for(lambda: not self.writer, timeout)
            if ok:
                self.readers += 1
            return ok

    def release_read(self) -> None:
        with self.cond:
            self.readers -= 1
            self.cond.notify_all()

    def acquire_write(self) -> None:
        with self.cond:
            self.cond.wait_for(lambda: not self.writer)
            self.writer = True
            self.cond.wait_for(lambda: self.readers == 0)

    def release_write(self) -> None:
        with self.cond:
            self.writer = False
            self.cond.notify_all()


Route = Callable[["Request"], tuple[int, Any]]


class Request:
    def __init__(self, handler: BaseHTTPRequestHandler, body: Any) -> None:
        parts = urlsplit(handler.path)
        self.method, self.path = handler.command, parts.path
        self.query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        self.body = body


def serve(args: argparse.Namespace, routes: Callable[[Request], Route | None]) -> None:
    """Answer each request with the route ``routes`` picks (404 when none), logging it,
    on a thread of its own."""
    log: Path = args.log
    log_lock = threading.Lock()

    def write(row: dict[str, Any]) -> None:
        with log_lock, log.open("a") as f:
            f.write(json.dumps(row) + "\n")

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *a: Any) -> None:
            pass

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            try:
                body = json.loads(raw) if raw else None
            except ValueError:
                body = raw.decode("utf-8", "replace")
            req = Request(self, body)
            row = {"method": req.method, "path": req.path, "query": req.query, "body": body,
                   "at": time.time()}  # fmt: skip
            write(row)
            route = routes(req)
            status, doc = route(req) if route else (404, {"detail": "Not Found"})
            payload = b"" if doc is None else json.dumps(doc).encode()
            # Logged before it is sent, so a client that has the answer finds the row.
            write({**row, "done": time.time(), "status": status})
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            self.wfile.write(payload)

        do_GET = do_POST = _handle

    server = ThreadingHTTPServer((args.host, args.port), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()


Build = Callable[[list[str]], tuple[argparse.Namespace, Callable[[Request], Route | None]]]


def main(build: Build) -> None:
    """Run the pods named on the command line in this one process: each argument is one
    pod's own command line as JSON (``["--host", "127.0.0.2", ...]``). One process for a
    tier's pods saves each pod the start of Python, torch and transformers; each pod
    keeps its own state, address and log."""
    for raw in sys.argv[1:]:
        args, routes = build(json.loads(raw))
        serve(args, routes)
    threading.Event().wait()


def parser(what: str) -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=what)
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model-path", required=True)
    p.add_argument("--log", type=Path, required=True)
    p.add_argument("--reload-delay", type=float, default=0.0, help="a load takes this long more")
    return p


PROMPT = hfmodel.PROMPT
