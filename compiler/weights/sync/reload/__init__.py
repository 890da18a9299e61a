"""Ask a tier's running engines to load the generation just swapped in, a few pods at a
time, and report what each pod is observed to serve.

Only after the new model directory is complete, verified and swapped in does a sync
ask anything of an engine. It finds the tier's pods by resolving one name (the headless
Service standbyc emits per tier: every ready pod's address, no API-server rights
needed), asks every pod what it serves (which changes nothing), then asks the pods that
do not serve the generation to load it in waves of at most ``max_unavailable``, so the
rest of the tier keeps serving. A wave with a failure ends the reload: the pods after it
keep what they serve. A wave starts only if a pod's whole sequence fits in what is left
of the deadline, and a stop (the Job's SIGTERM) lets the wave in flight finish.

Each engine's sequence is its own module, one row in ``ENGINES`` (docs/engine-reload.md):
``sglang``, ``vllm``, ``triton``. Each ends by reading back what the pod serves; an answer
of the wrong shape is a refusal, never a success. What the pods confirmed, and the
journal of pods left out of service, are kept beside the model directory, so a rerun asks
only the pods that have not confirmed the generation and undoes what a killed run left.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
import urllib.parse
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any, NamedTuple

from compiler import engines as budget
from compiler.urls import http_url
from compiler.weights.sync.errors import StoreError
from compiler.weights.sync.reload import sglang, triton, vllm
from compiler.weights.sync.reload.outcome import (
    BROKEN,
    CURRENT,
    DOWN,
    MISSING,
    OK,
    REFUSED,
    SKIPPED,
    TIMEOUT,
    Outcome,
    PodResult,
    Wave,
)
from compiler.weights.sync.reload.steps import (
    Broken,
    Down,
    Entry,
    Journal,
    Probe,
    Target,
    step_of,
)
from compiler.weights.sync.reload.wire import Pod, Refused

__all__ = ["ENGINES", "MAX_PODS", "MISSING", "Engines", "Outcome", "PodResult", "discover",
           "reload"]  # fmt: skip

MAX_PODS = 256


class Engine(NamedTuple):
    probe: Callable[[Pod, Target, Entry | None], Probe]
    load: Callable[[Pod, Target, Journal, Probe], str]


ENGINES: dict[str, Engine] = {
    "sglang": Engine(sglang.probe, sglang.load),
    "vllm": Engine(vllm.probe, vllm.load),
    "triton": Engine(triton.probe, triton.load),
}


@dataclass(frozen=True)
class Engines:
    api: str  # a key of ENGINES
    url: str  # http://HOST:PORT, HOST resolving to every ready pod of the tier
    model_path: str  # the model directory as the engines see it
    timeout: float  # seconds a long step (one pod's load, a drain) may take
    model: str = ""  # triton: the model's name in its repository
    swap: str = ""  # triton: "" (a new instance beside the old) or "unload-first"
    max_unavailable: int = 1  # pods asked to load at once
    expect: int = 0  # the tier's replicas: fewer ready addresses leave pods unknown
    deadline: float | None = None  # seconds the whole reload may take (None: its worst case)

    def __post_init__(self) -> None:
        try:
            parts = http_url(self.url)
        except ValueError as exc:
            raise StoreError(f"--engines: {exc}") from None
        if parts.scheme != "http":
            raise StoreError(f"--engines {self.url!r}: expected http://HOST:PORT")
        if self.api == "triton" and not self.model:
            raise StoreError("--reload triton needs --engine-model (the model's name)")
        if self.swap and self.api != "triton":
            raise StoreError("--engine-swap is Triton's: the other engines load in place")
        if not self.model_path.startswith("/"):
            raise StoreError("--engine-model-path must be the absolute path the engines load")

    @property
    def host(self) -> str:
        return urllib.parse.urlsplit(self.url).hostname or ""

    @property
    def port(self) -> int:
        return urllib.parse.urlsplit(self.url).port or 80

    def target(self, generation: int, other_weights: frozenset[str]) -> Target:
        return Target(self.api, self.model_path, generation, self.timeout, self.model,
                      self.swap, other_weights)  # fmt: skip


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


def _failure(address: str, exc: Exception, seconds: float) -> PodResult:
    if isinstance(exc, Broken):
        return PodResult(address, BROKEN, str(exc), seconds)
    if isinstance(exc, Down):
        return PodResult(address, TIMEOUT if exc.timed_out else DOWN, str(exc), seconds)
    return PodResult(address, REFUSED, str(exc), seconds)


FAILURES = (Refused, Down, Broken, OSError, http.client.HTTPException)


@dataclass
class _Run:
    engines: Engines
    engine: Engine
    target: Target
    journal: Journal
    confirmed: dict[str, Any]  # address -> the generation it confirmed last time
    until: float  # monotonic

    def probe(self, address: str) -> tuple[PodResult | None, Probe | None]:
        """A pod's final result (it serves the generation, or cannot be asked), or what
        the probe saw of a pod to load."""
        t0 = time.perf_counter()
        pod = Pod(address, self.engines.port)
        try:
            seen = self.engine.probe(pod, self.target, self.journal.get(address))
        except FAILURES as exc:
            return _failure(address, _as_step(exc), time.perf_counter() - t0), None
        took = time.perf_counter() - t0
        before = self.confirmed.get(address) == self.target.generation
        if seen.serves or (seen.serves is None and before):
            self.journal.set(address, None)
            why = seen.note if seen.serves else "confirmed before (the engine cannot say)"
            return PodResult(address, CURRENT, why, took), None
        if not seen.paused and step_of(self.journal.get(address)) == "paused":
            self.journal.set(address, None)  # resumed by the probe, or by someone
        return None, seen

    def load(self, address: str, seen: Probe, wave: int) -> PodResult:
        t0 = time.perf_counter()
        try:
            pod = Pod(address, self.engines.port)
            note = self.engine.load(pod, self.target, self.journal, seen)
        except FAILURES as exc:
            result = _failure(address, _as_step(exc), time.perf_counter() - t0)
        else:
            result = PodResult(address, OK, note, time.perf_counter() - t0)
        result.wave = wave
        return result


def _as_step(exc: Exception) -> Exception:
    if isinstance(exc, (OSError, http.client.HTTPException)):
        return Down(str(exc) or type(exc).__name__)
    return exc


def reload(
    engines: Engines,
    generation: int,
    before: dict[str, Any],
    *,
    save: Callable[[dict[str, Any]], None] | None = None,
    stop: threading.Event | None = None,
    other_weights: frozenset[str] = frozenset(),
) -> Outcome:
    """Have every pod serve ``generation``; ``before`` is the last record
    (``Outcome.record``), ``save`` persists a record while the reload runs."""
    t0 = time.perf_counter()
    out = Outcome(engines.api, generation, expected=engines.expect)
    kept = before.get("journal")
    entries = {a: e for a, e in kept.items() if step_of(e)} if isinstance(kept, dict) else {}
    journal = Journal(entries)
    pods_before = before.get("pods")
    confirmed = pods_before if isinstance(pods_before, dict) else {}

    def persist(entries: dict[str, Entry]) -> None:
        out.journal = entries
        if save is not None:
            save({**_carried(before), "journal": entries})

    journal.save = persist
    try:
        addresses = discover(engines)
    except StoreError as exc:
        out.error = str(exc)
        addresses = []
    worst = budget.tier_seconds(engines.api, engines.timeout, len(addresses),
                                       engines.max_unavailable, engines.swap)  # fmt: skip
    until = time.monotonic() + (engines.deadline if engines.deadline is not None else worst)
    run = _Run(engines, ENGINES[engines.api], engines.target(generation, other_weights),
               journal, confirmed, until)  # fmt: skip
    results, to_load = _probe_all(run, addresses)
    results += _waves(run, out, to_load, stop, t0)
    out.pods = sorted(results, key=lambda p: p.address)
    out.journal = dict(journal.entries)
    previous = before.get("generation")
    if out.failed == 0:
        out.served = generation
    elif type(previous) is int and previous <= generation:
        out.served = previous
    out.seconds = time.perf_counter() - t0
    return out


def _carried(before: dict[str, Any]) -> dict[str, Any]:
    return {k: before[k] for k in ("generation", "pods", "failed") if k in before}


def _probe_all(run: _Run, addresses: list[str]) -> tuple[list[PodResult], list[tuple[str, Probe]]]:
    if not addresses:
        return [], []
    with ThreadPoolExecutor(min(budget.PROBE_FANOUT, len(addresses)),
                            thread_name_prefix="probe") as pool:  # fmt: skip
        seen = list(pool.map(run.probe, addresses))
    done = [r for r, _ in seen if r is not None]
    to_load = [(a, p) for a, (_, p) in zip(addresses, seen, strict=True) if p is not None]
    return done, to_load


def _waves(
    run: _Run, out: Outcome, to_load: list[tuple[str, Probe]], stop: threading.Event | None,
    t0: float,
) -> list[PodResult]:  # fmt: skip
    size = max(1, run.engines.max_unavailable)
    each = budget.sequence_seconds(run.engines.api, run.engines.timeout, run.engines.swap)
    results: list[PodResult] = []
    why_not = ""
    for first in range(0, len(to_load), size):
        wave = to_load[first : first + size]
        left = run.until - time.monotonic()
        if not why_not and stop is not None and stop.is_set():
            why_not = "the Job was stopped before this wave; the next sync asks it"
        if not why_not and left < each:
            why_not = (
                f"out of time: a pod's sequence may take {each:g} s and {max(0.0, left):.0f} s "
                "of the reload's deadline were left; the next sync asks it"
            )
        if why_not:
            results += [PodResult(a, SKIPPED, why_not) for a, _ in wave]
            continue
        number, start = len(out.waves) + 1, time.perf_counter()
        with ThreadPoolExecutor(len(wave), thread_name_prefix="reload") as pool:
            done = list(pool.map(run.load, [a for a, _ in wave], [p for _, p in wave],
                                 [number] * len(wave)))  # fmt: skip
        out.waves.append(Wave([a for a, _ in wave], start - t0, time.perf_counter() - start))
        results += done
        failed = [r.address for r in done if not r.serves]
        if failed:
            why_not = f"the wave before failed ({', '.join(failed)}); it keeps what it serves"
    return results
