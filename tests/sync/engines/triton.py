"""A test engine with Triton's HTTP API (KServe v2 and its repository extension) and
its model lifecycle, serving one model through a vLLM-style backend.

Read from Triton's released source (server and core, r23.05 to r26.x): server
``src/http_server.cc`` (``HandleRepositoryControl``: 200 with an empty body, errors as
``{"error": ...}``), ``docs/user_guide/model_management.md``; core
``src/model_lifecycle.cc`` and ``src/model_config_utils.cc``
(``EquivalentInNonInstanceGroupConfig``); ``vllm_backend/src/model.py`` (the engine
arguments, the model path among them, come from ``model.json``).

- ``POST /v2/repository/models/<m>/load``: 503 unless ``--model-control-mode=explicit``.
  With no ``config`` and the model loaded (the repository unchanged): nothing happens.
  With a ``config`` equal to the serving one except perhaps ``instance_group``: an
  instance-group update, and no weight is read. Otherwise a new instance is loaded beside
  the old one (reading the model directory) and swapped in; on failure the old one keeps
  serving. 200, empty body; 400 ``{"error": ...}``.
- ``POST /v2/repository/models/<m>/unload``: the model serves nothing until loaded again.
- ``GET /v2/models/<m>/config``: the serving config (400 when not loaded);
  ``GET /v2/models/<m>/ready``: 200 or 400.
- ``POST /v2/models/<m>/generate``: ``text_output`` (and, here, the prompt's
  log-probabilities, which say which weights answer).

Test switches: ``--model-control-mode``, ``--refuse`` (every full load fails),
``--reload-delay``, ``--model-name``.
"""

from __future__ import annotations

import json
import threading
import time
from typing import Any

from tests.sync.engines.base import Request, Route, Weights, main, parser

SAME = "instance_group"  # the one field a load may change without reading the weights


class Triton:
    def __init__(self, args: Any) -> None:
        self.args = args
        self.name = args.model_name
        self.lock = threading.Lock()
        self.loads = 0  # full loads that read the weights, for the tests
        self.config: dict[str, Any] | None = {
            "name": self.name, "platform": "", "backend": "vllm", "max_batch_size": 0,
            "input": [{"name": "text_input", "data_type": "TYPE_STRING", "dims": [1]}],
            "output": [{"name": "text_output", "data_type": "TYPE_STRING", "dims": [-1]}],
            "instance_group": [{"name": f"{self.name}_0", "kind": "KIND_MODEL", "count": 1,
                                "gpus": [], "profile": [], "passive": False}],
            "parameters": {}, "model_transaction_policy": {"decoupled": True},
        }  # fmt: skip
        self.weights: Weights | None = Weights(args.model_path)

    def routes(self, req: Request) -> Route | None:
        m = f"/v2/models/{self.name}"
        repo = f"/v2/repository/models/{self.name}"
        return {
            ("GET", "/v2/health/ready"): lambda r: (200, None),
            ("GET", "/v2/health/live"): lambda r: (200, None),
            ("GET", f"{m}/config"): self.get_config,
            ("GET", f"{m}/ready"): lambda r: (200 if self.weights else 400, None),
            ("POST", f"{m}/generate"): self.generate,
            ("POST", "/v2/repository/index"): self.index,
            ("POST", f"{repo}/load"): self.load,
            ("POST", f"{repo}/unload"): self.unload,
        }.get((req.method, req.path))

    def _unknown(self) -> tuple[int, Any]:
        return 400, {"error": f"Request for unknown model: '{self.name}' has no available versions"}

    def get_config(self, req: Request) -> tuple[int, Any]:
        return (200, self.config) if self.config is not None else self._unknown()

    def index(self, req: Request) -> tuple[int, Any]:
        state = "READY" if self.config is not None else "UNAVAILABLE"
        return 200, [{"name": self.name, "version": "1", "state": state}]

    def load(self, req: Request) -> tuple[int, Any]:
        if self.args.model_control_mode != "explicit":
            return 503, {"error": "explicit model load / unload is not allowed if polling is "
                         "enabled"}  # fmt: skip
        params = (req.body or {}).get("parameters") or {}
        with self.lock:
            new = json.loads(params["config"]) if "config" in params else None
            if self.config is not None and (new is None or self._same(self.config, new)):
                if new is not None:
                    self.config = new  # an instance-group update: no weight is read
                return 200, None
            time.sleep(self.args.reload_delay)
            if self.args.refuse:
                return 400, {"error": f"failed to load '{self.name}': refused by the test engine"}
            try:
                weights = Weights(self.args.model_path)  # model.json's "model"
            except (OSError, ValueError) as exc:
                return 400, {"error": f"failed to load '{self.name}': {exc}"}
            self.weights, self.loads = weights, self.loads + 1
            self.config = new if new is not None else self.config or {"name": self.name}
            return 200, None

    @staticmethod
    def _same(old: dict[str, Any], new: dict[str, Any]) -> bool:
        return {k: v for k, v in old.items() if k != SAME} == {
            k: v for k, v in new.items() if k != SAME
        }

    def unload(self, req: Request) -> tuple[int, Any]:
        with self.lock:
            self.config, self.weights = None, None
        return 200, None

    def generate(self, req: Request) -> tuple[int, Any]:
        weights = self.weights
        if weights is None:
            return self._unknown()
        body = req.body if isinstance(req.body, dict) else {}
        rows = weights.logprobs(str(body.get("text_input", "")))
        return 200, {"model_name": self.name, "model_version": "1", "text_output": "",
                     "prompt_logprobs": rows}  # fmt: skip


def build(argv: list[str]) -> tuple[Any, Any]:
    p = parser("Triton's HTTP API over a transformers model")
    p.add_argument("--model-name", default="llama-7b")
    p.add_argument("--model-control-mode", default="explicit")
    p.add_argument("--refuse", action="store_true")
    args = p.parse_args(argv)
    return args, Triton(args).routes


if __name__ == "__main__":
    main(build)
