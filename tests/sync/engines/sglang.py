"""A test engine with SGLang's HTTP API and state machine.

Read from SGLang's released source (0.5.23; the routes since 0.5.6):
``sglang/srt/entrypoints/http_server.py`` (routes, status codes, ``/health``),
``sglang/srt/managers/tokenizer_manager.py`` (``update_weights_from_disk``,
``_update_model_path_info``), ``sglang/srt/managers/io_struct.py``
(``UpdateWeightFromDiskReqInput``), ``sglang/srt/server_args.py``.

- ``POST /update_weights_from_disk`` takes the model-update writer lock: requests in
  flight finish, new ones wait until the load is done. 200 ``{"success": true, "message",
  "num_paused_requests": 0}``; 400 with ``"success": false`` when the load fails (the old
  weights stay here; see docs/engine-reload.md for what the real engine does). On success
  the served model name becomes the path loaded, and ``weight_version`` is set.
- ``GET /model_info``: ``model_path``, ``served_model_name``, ``weight_version``, ...
- ``GET /v1/models``: the served model name as ``data[0].id``.
- ``GET /health``: with ``SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION`` on (its default)
  it generates a token, behind the writer lock, and answers 503 after
  ``SGLANG_HEALTH_CHECK_TIMEOUT`` seconds (20); off, it answers 200 at once.
- ``--weight-version`` (default ``"default"``) is what a fresh server reports;
  ``--served-model-name`` defaults to the model path; ``--admin-api-key`` (0.5.8 on)
  guards the weight update with 401 when no key is sent.
- ``POST /generate`` with ``return_logprob``: ``meta_info.input_token_logprobs``.

Test switches: ``--refuse`` (every load answers ``success: false``), ``--reload-delay``.

    python -m tests.sync.engines.sglang '["--host", "127.0.0.2", "--port", "30000",
        "--model-path", "D", "--log", "F"]' '["--host", "127.0.0.3", ...]'   # a pod each
"""

from __future__ import annotations

import os
import time
from typing import Any

from tests.sync.engines.base import Request, Route, RWLock, Weights, main, parser


class SGLang:
    def __init__(self, args: Any) -> None:
        self.args = args
        self.lock = RWLock()
        self.weights = Weights(args.model_path)
        self.model_path = args.model_path
        self.served_model_name = args.served_model_name or args.model_path
        self.weight_version = args.weight_version
        self.health_generates = os.environ.get(
            "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true"
        ).lower() not in ("0", "false")
        self.health_timeout = float(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20"))

    def routes(self, req: Request) -> Route | None:
        return {
            ("POST", "/update_weights_from_disk"): self.update,
            ("GET", "/model_info"): self.info,
            ("GET", "/get_model_info"): self.info,
            ("GET", "/v1/models"): self.models,
            ("GET", "/health"): self.health,
            ("POST", "/generate"): self.generate,
        }.get((req.method, req.path))

    def update(self, req: Request) -> tuple[int, Any]:
        body = req.body if isinstance(req.body, dict) else {}
        if self.args.admin_api_key:
            return 401, {"error": "Unauthorized"}
        if not isinstance(body.get("model_path"), str):
            return 400, {"object": "error", "message": "model_path is required",
                         "type": "Bad Request", "param": None, "code": 400}  # fmt: skip
        self.lock.acquire_write()
        try:
            time.sleep(self.args.reload_delay)
            if self.args.refuse:
                return 400, self._failed("refused by the test engine")
            try:
                self.weights = Weights(body["model_path"])
            except (OSError, ValueError) as exc:
                return 400, self._failed(str(exc))
            # _update_model_path_info: the served name becomes the path loaded
            self.model_path = self.served_model_name = body["model_path"]
            message = "Succeeded to update model weights."
            if body.get("weight_version") is not None:
                self.weight_version = str(body["weight_version"])
                message += f" Weight version updated to {self.weight_version}."
            return 200, {"success": True, "message": message, "num_paused_requests": 0}
        finally:
            self.lock.release_write()

    @staticmethod
    def _failed(why: str) -> dict[str, Any]:
        return {"success": False, "message": f"Failed to update weights: {why}.",
                "num_paused_requests": 0}  # fmt: skip

    def info(self, req: Request) -> tuple[int, Any]:
        return 200, {
            "model_path": self.model_path,
            "tokenizer_path": self.model_path,
            "served_model_name": self.served_model_name,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": self.weight_version,
            "has_image_understanding": False,
            "has_audio_understanding": False,
        }

    def models(self, req: Request) -> tuple[int, Any]:
        name = self.served_model_name
        card = {"id": name, "object": "model", "created": 0, "owned_by": "sglang",
                "root": name, "max_model_len": 4096}  # fmt: skip
        return 200, {"object": "list", "data": [card]}

    def health(self, req: Request) -> tuple[int, Any]:
        if not self.health_generates:
            return 200, None
        if not self.lock.acquire_read(self.health_timeout):  # a token, behind the writer
            return 503, None
        self.lock.release_read()
        return 200, None

    def generate(self, req: Request) -> tuple[int, Any]:
        body = req.body if isinstance(req.body, dict) else {}
        self.lock.acquire_read()
        try:
            rows = self.weights.logprobs(str(body.get("text", "")))
            version = self.weight_version
        finally:
            self.lock.release_read()
        return 200, {"text": "", "output_ids": [], "meta_info": {
            "id": "0", "finish_reason": {"type": "length", "length": 0},
            "prompt_tokens": len(rows), "completion_tokens": 0, "cached_tokens": 0,
            "weight_version": version, "input_token_logprobs": rows,
            "output_token_logprobs": []}}  # fmt: skip


def build(argv: list[str]) -> tuple[Any, Any]:
    p = parser("SGLang's HTTP API over a transformers model")
    p.add_argument("--refuse", action="store_true")
    p.add_argument("--served-model-name")
    p.add_argument("--weight-version", default="default")
    p.add_argument("--admin-api-key")
    args = p.parse_args(argv)
    return args, SGLang(args).routes


if __name__ == "__main__":
    main(build)
