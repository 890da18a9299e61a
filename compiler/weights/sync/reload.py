"""Ask a tier's running engines to load the generation just swapped in.

Only after the new model directory is complete, verified and swapped in does a sync
ask anything of an engine. It finds the tier's pods by resolving one name (the headless
Service standbyc emits per tier: every ready pod's address, no API-server rights
needed), then asks every pod at once; one pod failing does not stop the others. Each
engine's request and the answer that means "loaded" follow its own source
(docs/engine-reload.md):

- ``sglang`` (>= 0.5.6): ``POST /update_weights_from_disk`` with ``model_path`` and
  ``weight_version``; ``GET /model_info`` tells what a pod serves, so a pod that already
  serves the generation is not asked again.
- ``vllm`` (>= 0.16.0, ``VLLM_SERVER_DEV_MODE=1``): ``POST /pause?mode=wait``, then
  ``POST /collective_rpc`` with ``reload_weights``, then ``POST /resume``; from 0.27.0
  the weight version is set and read back as for SGLang.
- ``triton`` (>= 2.20.0, ``--model-control-mode=explicit``): ``POST
  /v2/repository/models/<name>/load`` with the model's own config, which forces a load.

What the pods confirmed is remembered beside the model directory, so a rerun (a retry
of the Job, or the next sync) asks only the pods that have not confirmed the generation.
"""

from __future__ import annotations

import http.client
import json
import socket
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

from compiler.urls import http_url
from compiler.weights.sync.errors import StoreError

MAX_PODS = 256
ANSWER_CAP = 1 << 20
OK, REFUSED, DOWN, TIMEOUT, CURRENT = "loaded", "refused", "unreachable", "timed out", "current"


@dataclass(frozen=True)
class Engines:
    api: str  # sglang | vllm | triton
    url: str  # http://HOST:PORT, HOST resolving to every pod of the tier
    model_path: str  # the model directory as the engines see it
    timeout: float  # seconds one pod may take to load
    model: str = ""  # triton: the model's name in its repository

    def __post_init__(self) -> None:
        try:
            parts = http_url(self.url)
        except ValueError as exc:
            raise StoreError(f"--engines: {exc}") from None
        if parts.scheme != "http":
            raise StoreError(f"--engines {self.url!r}: expected http://HOST:PORT")
        if self.api == "triton" and not self.model:
            raise StoreError("--reload triton needs --engine-model (the model's name)")
        if not self.model_path.startswith("/"):
            raise StoreError("--engine-model-path must be the absolute path the engines load")

    @property
    def host(self) -> str:
        return urllib.parse.urlsplit(self.url).hostname or ""

    @property
    def port(self) -> int:
        return urllib.parse.urlsplit(self.url).port or 80


@dataclass
class PodResult:
    address: str
    outcome: str  # OK, CURRENT, REFUSED, DOWN or TIMEOUT
    message: str = ""
    seconds: float = 0.0

    @property
    def serves(self) -> bool:
        return self.outcome in (OK, CURRENT)

    def to_json(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "outcome": self.outcome,
            "message": self.message,
            "seconds": round(self.seconds, 3),
        }


@dataclass
class Outcome:
    api: str
    generation: int
    pods: list[PodResult] = field(default_factory=list)
    served: int | None = None  # the generation the whole tier is known to serve
    seconds: float = 0.0
    error: str = ""  # the pods could not be found
    recorded_failed: int = 0  # ``recorded``: how many failed when they were last asked

    @property
    def failed(self) -> int:
        asked = sum(not p.serves for p in self.pods) + (1 if self.error else 0)
        return asked + self.recorded_failed

    def to_json(self) -> dict[str, Any]:
        return {
            "api": self.api,
            "generation": self.generation,
            "served_generation": self.served,
            "pods": [p.to_json() for p in self.pods],
            "confirmed": sum(p.serves for p in self.pods),
            "failed": self.failed,
            "seconds": round(self.seconds, 3),
            "error": self.error,
        }

    def text(self) -> str:
        n = len(self.pods)
        if self.error:
            return f"error: reload ({self.api}): {self.error}"
        if not n:
            return (
                f"reload ({self.api}): no ready pod to ask; pods load generation "
                f"{self.generation} when they start"
            )
        head = (
            f"reload ({self.api}): {n - self.failed} of {n} pod(s) serve generation "
            f"{self.generation} ({self.seconds:.2f} s)"
        )
        bad = [f"{p.address} {p.outcome}: {p.message}" for p in self.pods if not p.serves]
        return head if not bad else "error: " + head + "\n  " + "\n  ".join(bad)

    @classmethod
    def recorded(cls, api: str, generation: int, record: dict[str, Any]) -> Outcome:
        """What an earlier run's record says the tier serves (nobody asked this time)."""
        served, failed = record.get("generation"), record.get("failed")
        return cls(
            api,
            generation,
            served=served if isinstance(served, int) else None,
            recorded_failed=failed if isinstance(failed, int) and failed >= 0 else 0,
        )

    def record(self) -> dict[str, Any]:
        """What ``state.json`` keeps: per pod, the generation it confirmed; and how many
        did not load it, so that a later report pushes what this run pushed."""
        return {
            "generation": self.served,
            "pods": {p.address: self.generation for p in self.pods if p.serves},
            "failed": self.failed,
        }


def discover(engines: Engines, attempts: int = 3) -> list[str]:
    """Every address the engines' name resolves to (a headless Service: one per ready
    pod). A name that does not exist means no pod is ready: an empty list."""
    for attempt in range(attempts):
        try:
            infos = socket.getaddrinfo(engines.host, engines.port, type=socket.SOCK_STREAM)
        except socket.gaierror as exc:
            if exc.errno in (socket.EAI_NONAME, getattr(socket, "EAI_NODATA", -5)):
                return []
            if attempt + 1 == attempts:
                raise StoreError(f"{engines.host}: cannot resolve: {exc.strerror}") from None
            time.sleep(0.5 * 2**attempt)
            continue
        found = sorted({str(info[4][0]) for info in infos})
        if len(found) > MAX_PODS:
            raise StoreError(f"{engines.host}: {len(found)} addresses, more than {MAX_PODS}")
        return found
    return []


# --- the engines' requests ------------------------------------------------------------------


class _Refused(Exception):
    """The engine answered, and the answer is no."""


def _request(
    address: str, port: int, method: str, path: str, *, body: Any, timeout: float
) -> tuple[int, Any]:
    """One request with one deadline for connect and answer; the answer as JSON (or text)."""
    conn = http.client.HTTPConnection(address, port, timeout=timeout)
    try:
        payload = None if body is None else json.dumps(body).encode()
        headers = {"Content-Type": "application/json"} if payload is not None else {}
        conn.request(method, path, body=payload, headers=headers)
        resp = conn.getresponse()
        raw = resp.read(ANSWER_CAP)
    finally:
        conn.close()
    try:
        return resp.status, json.loads(raw) if raw else None
    except ValueError:
        return resp.status, raw.decode("utf-8", "replace")[:300]


def _why(status: int, answer: Any) -> str:
    if isinstance(answer, dict):
        for key in ("message", "error", "detail"):
            if answer.get(key):
                return f"HTTP {status}: {str(answer[key])[:300]}"
    return f"HTTP {status}: {str(answer)[:300]}"


def _get_json(e: Engines, address: str, paths: tuple[str, ...]) -> dict[str, Any] | None:
    """The first of ``paths`` that answers 200 with a JSON object (older engine versions
    know only the later paths)."""
    for path in paths:
        status, answer = _request(address, e.port, "GET", path, body=None, timeout=10.0)
        if status == 200 and isinstance(answer, dict):
            return answer
        if status != 404:
            return None
    return None


def _post(e: Engines, address: str, path: str, body: Any, timeout: float) -> None:
    status, answer = _request(address, e.port, "POST", path, body=body, timeout=timeout)
    if status != 200:
        raise _Refused(_why(status, answer))


def _sglang_serves(e: Engines, address: str, generation: int) -> bool:
    # /model_info since SGLang 0.5.6; /get_model_info, its deprecated alias, before.
    info = _get_json(e, address, ("/model_info", "/get_model_info"))
    return info is not None and info.get("weight_version") == str(generation)


def _sglang(e: Engines, address: str, generation: int) -> None:
    # Without abort_all_requests the engine lets running requests finish and holds new ones
    # while it loads; weight_version (SGLang >= 0.5.1) is what /model_info then reports.
    body = {"model_path": e.model_path, "weight_version": str(generation)}
    status, answer = _request(
        address, e.port, "POST", "/update_weights_from_disk", body=body, timeout=e.timeout
    )
    if status != 200 or not (isinstance(answer, dict) and answer.get("success") is True):
        raise _Refused(_why(status, answer))


def _vllm_serves(e: Engines, address: str, generation: int) -> bool:
    info = _get_json(e, address, ("/weight_info",))  # vLLM >= 0.27.0
    return info is not None and info.get("weight_version") == str(generation)


def _vllm(e: Engines, address: str, generation: int) -> None:
    # reload_weights is not synchronised with serving: pause (letting running requests
    # finish), reload, resume, whatever the reload did.
    _post(e, address, "/pause?mode=wait", None, e.timeout)
    try:
        body = {
            "method": "reload_weights",
            "kwargs": {"weights_path": e.model_path},
            "timeout": e.timeout,
        }
        try:
            _post(e, address, "/collective_rpc", body, e.timeout + 5)
        except _Refused as exc:
            raise _Refused(
                f"{exc} (vLLM's reload is not transactional: restart this pod)"
            ) from None
    finally:
        _post(e, address, "/resume", None, 30.0)
    status, _ = _request(address, e.port, "POST", "/update_weight_version",
                         body={"new_version": str(generation)}, timeout=10.0)  # fmt: skip
    if status not in (200, 404):  # 404: before vLLM 0.27.0, no version to set
        raise _Refused(f"loaded, but /update_weight_version answered HTTP {status}")


def _triton(e: Engines, address: str, generation: int) -> None:
    # A load is a no-op unless the model's repository directory changed or a config is
    # given: pass the model's own config back, which makes Triton load it again.
    name = urllib.parse.quote(e.model, safe="")
    config = _get_json(e, address, (f"/v2/models/{name}/config",))
    if config is None:
        raise _Refused(f"GET /v2/models/{e.model}/config gave no model configuration")
    body = {"parameters": {"config": json.dumps(config)}}
    _post(e, address, f"/v2/repository/models/{name}/load", body, e.timeout)


Ask = Callable[[Engines, str, int], None]
Serves = Callable[[Engines, str, int], bool]
APIS: dict[str, tuple[Ask, Serves | None]] = {
    "sglang": (_sglang, _sglang_serves),
    "vllm": (_vllm, _vllm_serves),
    "triton": (_triton, None),  # its model versions do not change on a reload
}


def _one(e: Engines, address: str, generation: int, confirmed: bool) -> PodResult:
    ask, serves = APIS[e.api]
    t0 = time.perf_counter()
    try:
        if serves is not None and serves(e, address, generation):
            return PodResult(address, CURRENT, "already serves it", time.perf_counter() - t0)
        if serves is None and confirmed:
            return PodResult(address, CURRENT, "confirmed before", 0.0)
        ask(e, address, generation)
        return PodResult(address, OK, "", time.perf_counter() - t0)
    except _Refused as exc:
        return PodResult(address, REFUSED, str(exc), time.perf_counter() - t0)
    except TimeoutError:
        return PodResult(address, TIMEOUT, f"no answer in {e.timeout:g} s",
                         time.perf_counter() - t0)  # fmt: skip
    except (OSError, http.client.HTTPException) as exc:
        return PodResult(address, DOWN, str(exc) or type(exc).__name__, time.perf_counter() - t0)


def reload(engines: Engines, generation: int, before: dict[str, Any]) -> Outcome:
    """Ask every pod to serve ``generation``; ``before`` is the last record (``record``)."""
    t0 = time.perf_counter()
    out = Outcome(engines.api, generation)
    pods_before = before.get("pods") if isinstance(before.get("pods"), dict) else {}
    assert isinstance(pods_before, dict)
    try:
        addresses = discover(engines)
    except StoreError as exc:
        out.error = str(exc)
        addresses = []
    if addresses:
        with ThreadPoolExecutor(min(16, len(addresses)), thread_name_prefix="reload") as pool:
            out.pods = list(
                pool.map(
                    lambda a: _one(engines, a, generation, pods_before.get(a) == generation),
                    addresses,
                )
            )
    previous = before.get("generation")
    if out.failed == 0:
        out.served = generation
    elif isinstance(previous, int) and previous <= generation:
        out.served = previous
    out.seconds = time.perf_counter() - t0
    return out
