"""A test engine with vLLM's HTTP API and its pause and reload state machine.

Read from vLLM's released source (sdists 0.14.1, 0.16.0, 0.26.0, 0.27.0, 0.33.0, 0.34.0):
``vllm/entrypoints/serve/rlhf/api_router.py`` (0.14-0.16; ``serve/dev/rlhf`` 0.26-0.27,
``rl/online/api_router.py`` 0.33 on: ``/pause``, ``/resume``, ``/is_paused``,
``/update_weight_version``, ``/weight_info``, ``/weight_checker``),
``serve/dev/rpc/api_router.py`` (``/collective_rpc``),
``vllm/v1/engine/async_llm.py`` (``pause_generation``), ``vllm/v1/engine/core.py``
(``_weight_version = "default"``), ``model_executor/model_loader/reload/inplace.py``
(``reload_weights``), ``entrypoints/serve/instrumentator/basic.py`` (``/version``).

- Every route here but ``/version``, ``/health`` and ``/v1/completions`` needs
  ``VLLM_SERVER_DEV_MODE=1`` (404 otherwise).
- ``POST /pause``: before 0.16.0 it takes only ``wait_for_inflight_requests`` (default
  false), so ``mode=wait`` is ignored and requests in flight are aborted. From 0.16.0
  ``mode`` is ``abort`` (default), ``wait`` or ``keep``. The engine is paused first, then
  drained: a pause whose answer never comes leaves it paused. Only ``/resume`` unpauses.
- While paused, new requests wait for ``/resume``; from 0.33.0 they get 503.
- ``reload_weights``: every layer's parameters are moved aside, then loaded from
  ``weights_path``; a failure part-way leaves the model unusable (no rollback). Errors
  answer 500 ``{"error": ...}``.
- ``/update_weight_version`` and ``/weight_info`` from 0.27.0 (a fresh engine reports
  ``"default"``); ``/weight_checker`` (checksums) from 0.33.0.

Test switches: ``--version``, ``--fail-reloads N`` (the first N reloads fail part-way),
``--no-op-reloads`` (a reload answers success and loads nothing), ``--reload-delay``,
``--request-delay`` (each completion takes this long: requests in flight to drain or
abort).

    VLLM_SERVER_DEV_MODE=1 python -m tests.sync.engines.vllm '["--host", "127.0.0.2", ...]'

"""

from __future__ import annotations

import os
import threading
import time
from typing import Any

from tests.sync.engines.base import Request, Route, Weights, main, parser


def _v(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in text.split(".")[:3])


class VLLM:
    def __init__(self, args: Any) -> None:
        self.args = args
        self.version = _v(args.version)
        self.dev = os.environ.get("VLLM_SERVER_DEV_MODE") == "1"
        self.cond = threading.Condition()
        self.paused = False
        self.in_flight = 0
        self.aborted = 0  # requests a pause aborted
        self.weights: Weights | None = Weights(args.model_path)
        self.weight_version = "default"
        self.failures_left = args.fail_reloads

    def routes(self, req: Request) -> Route | None:
        public = {
            ("GET", "/version"): self.show_version,
            ("GET", "/health"): lambda r: (200, None),
            ("POST", "/v1/completions"): self.completions,
        }
        dev = {
            ("POST", "/pause"): self.pause,
            ("POST", "/resume"): self.resume,
            ("GET", "/is_paused"): lambda r: (200, {"is_paused": self.paused}),
            ("POST", "/collective_rpc"): self.collective_rpc,
        }
        if self.version >= (0, 27, 0):
            dev[("POST", "/update_weight_version")] = self.set_weight_version
            dev[("GET", "/weight_info")] = lambda r: (200, {"weight_version": self.weight_version})
        if self.version >= (0, 33, 0):
            dev[("POST", "/weight_checker")] = self.weight_checker
        key = (req.method, req.path)
        return public.get(key) or (dev.get(key) if self.dev else None)

    def show_version(self, req: Request) -> tuple[int, Any]:
        return 200, {"version": self.args.version}

    def pause(self, req: Request) -> tuple[int, Any]:
        if self.version < (0, 16, 0):  # only wait_for_inflight_requests; mode is ignored
            wait = req.query.get("wait_for_inflight_requests", "false") == "true"
            mode = "wait" if wait else "abort"
        else:
            mode = req.query.get("mode", "abort")
            if mode not in ("abort", "wait", "keep"):
                return 422, {"detail": [{"loc": ["query", "mode"], "msg": "bad mode"}]}
        with self.cond:
            self.paused = True  # paused first, then drained
            if mode == "abort":
                self.aborted += self.in_flight
                self.cond.notify_all()
            elif mode == "wait":
                self.cond.wait_for(lambda: self.in_flight == 0)
        return 200, {"status": "paused"}

    def resume(self, req: Request) -> tuple[int, Any]:
        with self.cond:
            self.paused = False
            self.cond.notify_all()
        return 200, {"status": "resumed"}

    def collective_rpc(self, req: Request) -> tuple[int, Any]:
        body = req.body if isinstance(req.body, dict) else {}
        if body.get("method") != "reload_weights":
            return 400, {"detail": "only reload_weights here"}
        path = (body.get("kwargs") or {}).get("weights_path") or self.args.model_path
        if self.args.no_op_reloads:  # a broken engine: success, and nothing loaded
            return 200, {"results": [None]}
        self.weights = None  # parameters moved aside: from here no rollback
        time.sleep(self.args.reload_delay)
        if self.failures_left > 0:
            self.failures_left -= 1
            return 500, {"error": "reload_weights failed part-way (test engine)"}
        try:
            self.weights = Weights(path)
        except (OSError, ValueError) as exc:
            return 500, {"error": f"reload_weights: {exc}"}
        return 200, {"results": [None]}

    def set_weight_version(self, req: Request) -> tuple[int, Any]:
        body = req.body if isinstance(req.body, dict) else {}
        self.weight_version = str(body.get("new_version"))
        return 200, {"success": True, "new_version": self.weight_version}

    def weight_checker(self, req: Request) -> tuple[int, Any]:
        if self.weights is None:
            return 500, {"detail": "weights are not loaded"}
        return 200, {"checksums": self.weights.checksums()}

    def completions(self, req: Request) -> tuple[int, Any]:
        body = req.body if isinstance(req.body, dict) else {}
        with self.cond:
            if self.paused and self.version >= (0, 33, 0):
                return 503, {"error": {"message": "The engine is paused", "code": 503}}
            self.cond.wait_for(lambda: not self.paused)
            self.in_flight += 1
            aborted_before = self.aborted
        try:
            time.sleep(self.args.request_delay)
            with self.cond:
                if self.aborted > aborted_before:
                    return 200, {"choices": [{"finish_reason": "abort", "text": ""}]}
            if self.weights is None:
                return 500, {"error": {"message": "the model has no weights loaded"}}
            rows = self.weights.logprobs(str(body.get("prompt", "")))
        finally:
            with self.cond:
                self.in_flight -= 1
                self.cond.notify_all()
        prompt_logprobs = [None] + [{str(t): {"logprob": lp}} for lp, t, _ in rows[1:]]
        return 200, {"choices": [{"finish_reason": "length", "text": "",
                                  "prompt_logprobs": prompt_logprobs}]}  # fmt: skip


def build(argv: list[str]) -> tuple[Any, Any]:
    p = parser("vLLM's HTTP API over a transformers model")
    p.add_argument("--version", default="0.34.0")
    p.add_argument("--fail-reloads", type=int, default=0)
    p.add_argument("--request-delay", type=float, default=0.0)
    p.add_argument("--no-op-reloads", action="store_true")
    args = p.parse_args(argv)
    return args, VLLM(args).routes


if __name__ == "__main__":
    main(build)
