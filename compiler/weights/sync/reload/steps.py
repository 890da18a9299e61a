"""What every engine's sequence is made of: the target, one checked request, the
journal of what a pod was left in, and the two ways a load fails.

An engine module (``sglang``, ``vllm``, ``triton``) provides ``probe`` (what a pod
serves, asking nothing of it that changes it) and ``load`` (the engine's own sequence,
which ends in reading back what the pod serves). Each step is one request through
``wire.Pod`` with a bound named in any message about it.
"""

from __future__ import annotations

import http.client
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from compiler import engines as budget
from compiler.weights.sync.reload.wire import Answer, Pod, Refused


@dataclass(frozen=True)
class Target:
    """What each pod of the tier is asked to serve."""

    api: str  # sglang | vllm | triton
    model_path: str  # the model directory as the engines see it
    generation: int
    timeout: float  # seconds a long step (a load, a drain) may take
    model: str = ""  # triton: the model's name in its repository
    swap: str = ""  # triton: "" (side by side) or budget.UNLOAD_FIRST
    # The published generations whose weights differ from this one's (as the store's
    # index says): a pod serving one of them must serve other weights after its load.
    other_weights: frozenset[str] = frozenset()

    @property
    def version(self) -> str:
        return str(self.generation)

    @property
    def step(self) -> float:
        return budget.step_seconds(self.timeout)

    @property
    def probe(self) -> float:
        return budget.probe_seconds(self.timeout)


class Broken(Exception):
    """The pod is out of service: its weights are unknown (a load failed part-way) or it
    serves nothing; nothing resumes it onto them. A restart, or the next sync, fixes it."""


class Down(Exception):
    """The pod cannot be reached, or a step's whole answer did not come in time."""

    def __init__(self, message: str, *, timed_out: bool = False) -> None:
        super().__init__(message)
        self.timed_out = timed_out


# A pod's journal entry, kept in the state beside the model directory before each step
# that leaves the pod out of service, so that a sync killed in between is undone by the
# next one: PAUSED, its weights intact (resume it); LOADING, its weights unknown (load
# the generation again before it serves).
PAUSED, LOADING = "paused", "loading"


Entry = dict[str, Any]  # {"step": PAUSED | LOADING, ...what undoing it needs}


@dataclass
class Journal:
    """Where each pod was left; ``save`` writes the whole journal (under the lock)."""

    entries: dict[str, Entry] = field(default_factory=dict)
    save: Callable[[dict[str, Entry]], None] = lambda entries: None
    lock: threading.Lock = field(default_factory=threading.Lock)

    def set(self, address: str, step: str | None, **keep: Any) -> None:
        with self.lock:
            if step is None:
                if self.entries.pop(address, None) is None:
                    return
            else:
                self.entries[address] = {"step": step, **keep}
            self.save(dict(self.entries))

    def get(self, address: str) -> Entry | None:
        with self.lock:
            return self.entries.get(address)


def step_of(entry: Entry | None) -> str | None:
    step = entry.get("step") if isinstance(entry, dict) else None
    return step if step in (PAUSED, LOADING) else None


class Probe(NamedTuple):
    serves: bool | None  # None: the pod cannot say (the Job's record decides)
    note: str = ""
    paused: bool = False  # vLLM: the pod is paused now
    version: str | None = None  # the weight version the pod reports, if it does


Check = Callable[[Answer], bool]


def is_object(answer: Answer) -> bool:
    return answer.json and isinstance(answer.body, dict)


def ask(
    pod: Pod,
    method: str,
    path: str,
    seconds: float,
    *,
    body: Any = None,
    ok: Check | None = None,
    hint: dict[int, str] | None = None,
) -> Answer:
    """One step: the answer, if it is HTTP 200 and passes ``ok`` (the shape that engine
    answers on success); else Refused naming the request and the engine's words, with
    ``hint`` for the statuses whose usual cause is a server flag."""
    try:
        answer = pod.request(method, path, seconds=seconds, body=body)
    except TimeoutError:
        raise Down(f"{method} {path}: no whole answer in {seconds:g} s", timed_out=True) from None
    except (OSError, http.client.HTTPException) as exc:
        raise Down(f"{method} {path}: {exc or type(exc).__name__}") from None
    except Refused as exc:
        raise Refused(str(exc)) from None
    if answer.status == 200 and (ok is None or ok(answer)):
        return answer
    extra = (hint or {}).get(answer.status, "")
    if answer.status == 200:
        extra = "not the answer this engine gives on success" + (f"; {extra}" if extra else "")
    raise Refused(f"{method} {path}: {answer.why()}" + (f" ({extra})" if extra else ""))


def field_of(answer: Answer, key: str) -> Any:
    return answer.body.get(key) if is_object(answer) else None
