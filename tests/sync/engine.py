"""A small inference engine for the tests: SGLang's HTTP shapes, transformers inside.

The requests and answers follow SGLang 0.5.23's own source (python/sglang/srt/
entrypoints/http_server.py, managers/io_struct.py, managers/tokenizer_manager.py;
docs/engine-reload.md cites the lines):

- ``POST /update_weights_from_disk`` ``{"model_path": str, "load_format": str|null,
  "weight_version": str|null, ...}``: 200 ``{"success": true, "message": ...,
  "num_paused_requests": 0}``; 400 with ``"success": false`` when the load fails; 400 in
  the OpenAI error shape when ``model_path`` is missing. Requests wait while it loads.
- ``GET /model_info``: ``model_path``, ``weight_version`` and the rest of its keys.
- ``POST /generate`` ``{"text": ..., "sampling_params": {"max_new_tokens": 0},
  "return_logprob": true, "logprob_start_len": 0}``: ``meta_info.input_token_logprobs``
  as ``[[logprob, token_id, null], ...]`` (the first token's logprob null) and
  ``meta_info.weight_version``.
- ``GET /health``: 200.

It loads with ``AutoTokenizer`` and ``AutoModelForCausalLM.from_pretrained``, as
``transformers``-based engines do. Fault switches for the tests: ``--refuse`` (every
reload answers ``success: false``), ``--reload-delay S`` (a reload takes S seconds more).
Every request is logged as a JSON line to ``--log``.

    python -m tests.sync.engine --host 127.0.0.2 --port 30000 --model-path DIR --log F
"""

from __future__ import annotations

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any


class Engine:
    def __init__(self, model_path: str, *, refuse: bool, delay: float) -> None:
        import torch  # noqa: PLC0415

        torch.set_num_threads(1)  # the same arithmetic as the tests' reference
        self.torch = torch
        self.refuse, self.delay = refuse, delay
        self.lock = threading.Lock()  # a reload holds it; requests wait, as in SGLang
        self.weight_version = "default"
        self.model_path = model_path
        self._load(model_path)

    def _load(self, path: str) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

        self.tokenizer = AutoTokenizer.from_pretrained(path)
        self.model = AutoModelForCausalLM.from_pretrained(path, dtype=self.torch.bfloat16)
        self.model.eval()

    def update(self, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        with self.lock:
            time.sleep(self.delay)
            if self.refuse:
                message = "Failed to update weights: refused by the test engine."
                return 400, {"success": False, "message": message, "num_paused_requests": 0}
            try:
                self._load(body["model_path"])
            except (OSError, ValueError) as exc:
                message = f"Failed to update weights: {exc}."
                return 400, {"success": False, "message": message, "num_paused_requests": 0}
            self.model_path = body["model_path"]
            message = "Succeeded to update model weights."
            if body.get("weight_version") is not None:
                self.weight_version = str(body["weight_version"])
                message += f" Weight version updated to {self.weight_version}."
            return 200, {"success": True, "message": message, "num_paused_requests": 0}

    def info(self) -> dict[str, Any]:
        return {
            "model_path": self.model_path,
            "served_model_name": self.model_path,
            "tokenizer_path": self.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": self.weight_version,
            "load_format": "auto",
        }

    def generate(self, body: dict[str, Any]) -> dict[str, Any]:
        with self.lock:
            ids = self.tokenizer(body["text"])["input_ids"]
            with self.torch.no_grad():
                logits = self.model(input_ids=self.torch.tensor([ids])).logits[0]
            logprobs = self.torch.log_softmax(logits.float(), dim=-1)
            rows = [[None, ids[0], None]] + [
                [float(logprobs[i - 1, t]), t, None] for i, t in enumerate(ids) if i
            ]
            return {
                "text": "",
                "output_ids": [],
                "meta_info": {
                    "id": "0",
                    "finish_reason": {"type": "length", "length": 0},
                    "prompt_tokens": len(ids),
                    "completion_tokens": 0,
                    "cached_tokens": 0,
                    "weight_version": self.weight_version,
                    "input_token_logprobs": rows,
                    "output_token_logprobs": [],
                },
            }


def handler(engine: Engine, log: Path) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, status: int, doc: Any) -> None:
            raw = b"" if doc is None else json.dumps(doc).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def _log(self, body: Any) -> None:
            with log.open("a") as f:
                f.write(json.dumps({"method": self.command, "path": self.path,
                                    "body": body, "at": time.time()}) + "\n")  # fmt: skip

        def do_GET(self) -> None:
            self._log(None)
            if self.path == "/health":
                self._answer(200, None)
            elif self.path in ("/model_info", "/get_model_info"):
                self._answer(200, engine.info())
            else:
                self._answer(404, {"detail": "Not Found"})

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or "{}")
            self._log(body)
            if self.path == "/update_weights_from_disk":
                if not isinstance(body.get("model_path"), str):
                    error = {"object": "error", "message": "model_path is required",
                             "type": "Bad Request", "param": None, "code": 400}  # fmt: skip
                    self._answer(400, error)
                    return
                self._answer(*engine.update(body))
            elif self.path == "/generate":
                self._answer(200, engine.generate(body))
            else:
                self._answer(404, {"detail": "Not Found"})

    return Handler


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--host", required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--model-path", required=True)
    p.add_argument("--log", type=Path, required=True)
    p.add_argument("--refuse", action="store_true")
    p.add_argument("--reload-delay", type=float, default=0.0)
    args = p.parse_args()
    engine = Engine(args.model_path, refuse=args.refuse, delay=args.reload_delay)
    server = ThreadingHTTPServer((args.host, args.port), handler(engine, args.log))
    server.serve_forever()


if __name__ == "__main__":
    main()
