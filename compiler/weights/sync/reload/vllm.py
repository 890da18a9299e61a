"""vLLM (>= 0.16.0, ``VLLM_SERVER_DEV_MODE=1``): pause, reload, resume, as its source
has it (vLLM 0.16.0 to 0.34.0; docs/engine-reload.md cites the files).

- ``POST /pause?mode=wait`` sets the engine paused, then waits for requests in flight;
  nothing but ``POST /resume`` unpauses it. Before 0.16.0 the route has no ``mode`` and
  aborts requests in flight, so those versions are refused before anything is asked. From
  0.33.0 new requests get 503 while the engine is paused.
- ``collective_rpc`` ``reload_weights`` moves each layer's parameters aside, then loads;
  there is no rollback. A reload that failed is tried once more from the same verified
  directory; if that fails too, the pod stays paused (out of service), never resumed
  onto weights nobody knows.
- The weight version (0.27.0 on) is set after the load and read back; from 0.33.0, a pod
  that reported a generation whose weights differ must report other weights' checksums
  (``/weight_checker``) after the load.

Before each step that leaves the pod out of service, the journal records it, so a sync
killed in between is undone by the next: a pod left paused with its weights intact is
resumed; one left in a load is loaded again before it is resumed.
"""

from __future__ import annotations

import re
from typing import Any

from compiler.weights.sync.reload.steps import (
    LOADING,
    PAUSED,
    Broken,
    Down,
    Entry,
    Journal,
    Probe,
    Target,
    ask,
    field_of,
    is_object,
    step_of,
)
from compiler.weights.sync.reload.wire import Pod, Refused

OLDEST = (0, 16, 0)  # /pause?mode=wait
WEIGHT_VERSION = (0, 27, 0)  # /update_weight_version, /weight_info
CHECKSUMS = (0, 33, 0)  # /weight_checker
DEV_MODE = {
    404: "vLLM serves this route only when the server runs with VLLM_SERVER_DEV_MODE=1 "
    "in its environment"
}


def _version(pod: Pod, t: Target) -> tuple[int, ...]:
    answer = ask(pod, "GET", "/version", t.probe, ok=lambda a: isinstance(
        field_of(a, "version"), str))  # fmt: skip
    text = str(field_of(answer, "version"))
    found = re.match(r"(\d+)\.(\d+)\.(\d+)", text)
    if found is None:
        raise Refused(f"GET /version: {text!r} is not a vLLM version")
    version = tuple(int(x) for x in found.groups())
    if version < OLDEST:
        raise Refused(
            f"vLLM {text}: its /pause aborts the requests in flight (mode=wait arrived in "
            "0.16.0); upgrade the engine, or use reload api restart"
        )
    return version


def _paused(pod: Pod, t: Target) -> bool:
    answer = ask(pod, "GET", "/is_paused", t.probe, hint=DEV_MODE,
                 ok=lambda a: isinstance(field_of(a, "is_paused"), bool))  # fmt: skip
    return bool(field_of(answer, "is_paused"))


def _weight_version(pod: Pod, t: Target, seconds: float) -> Any:
    answer = ask(pod, "GET", "/weight_info", seconds, hint=DEV_MODE,
                 ok=lambda a: "weight_version" in (a.body if is_object(a) else {}))  # fmt: skip
    return field_of(answer, "weight_version")


def probe(pod: Pod, t: Target, entry: Entry | None) -> Probe:
    version = _version(pod, t)
    paused = _paused(pod, t)
    step = step_of(entry)
    if paused and step is None:
        raise Refused(
            "the pod is paused, and not by standbyc: resume it (POST /resume) or restart it"
        )
    if step == PAUSED and paused:  # left by a sync that was stopped: its weights are intact
        _resume(pod, t)
        paused = False
    if step == LOADING and paused:
        return Probe(False, "left paused in a load by an earlier sync", paused=True)
    if version < WEIGHT_VERSION:
        return Probe(None, f"vLLM {'.'.join(map(str, version))} cannot say what it serves")
    served = _weight_version(pod, t, t.probe)
    return Probe(served == t.version, f"weight_version {served!r}",
                 version=served if isinstance(served, str) else None)  # fmt: skip


def _resume(pod: Pod, t: Target) -> None:
    ask(pod, "POST", "/resume", t.step, hint=DEV_MODE,
        ok=lambda a: field_of(a, "status") == "resumed")  # fmt: skip


def _checksums(pod: Pod, t: Target) -> Any:
    answer = ask(pod, "POST", "/weight_checker", t.step, body={"action": "checksum"},
                 ok=lambda a: isinstance(field_of(a, "checksums"), dict))  # fmt: skip
    return field_of(answer, "checksums")


def _reload(pod: Pod, t: Target) -> None:
    body = {"method": "reload_weights", "kwargs": {"weights_path": t.model_path},
            "timeout": t.timeout}  # fmt: skip
    ask(pod, "POST", "/collective_rpc", t.timeout + 5, body=body, hint=DEV_MODE,
        ok=lambda a: isinstance(field_of(a, "results"), list))  # fmt: skip


def _reload_twice(pod: Pod, t: Target) -> str:
    """The load, and once more if it failed; Broken if both did (the pod stays paused)."""
    try:
        _reload(pod, t)
        return ""
    except Refused as first:
        try:
            _reload(pod, t)
            return f"loaded on the second try (the first: {first})"
        except (Refused, Down) as second:
            raise Broken(
                f"reload_weights failed twice ({first}; then {second}); vLLM's reload has no "
                "rollback, so the pod stays paused: restart it"
            ) from None
    except Down as exc:
        raise Broken(
            f"{exc}; its weights are unknown (vLLM's reload has no rollback), so the pod "
            "stays paused: restart it, or the next sync loads it again"
        ) from None


def load(pod: Pod, t: Target, journal: Journal, seen: Probe) -> str:
    version = _version(pod, t)
    # A pod known to serve other weights must serve changed ones after the load.
    compare = version >= CHECKSUMS and seen.version in t.other_weights
    before = _checksums(pod, t) if compare else None
    if not seen.paused:
        journal.set(pod.address, PAUSED)
        try:
            ask(pod, "POST", "/pause?mode=wait", t.timeout, hint=DEV_MODE,
                ok=lambda a: field_of(a, "status") == "paused")  # fmt: skip
        except (Refused, Down) as exc:
            _resume_intact(pod, t, journal, exc)
            raise
    journal.set(pod.address, LOADING)
    note = _reload_twice(pod, t)
    if before is not None and _checksums(pod, t) == before:
        journal.set(pod.address, PAUSED)
        _resume_intact(pod, t, journal, None)
        raise Refused(
            "reload_weights answered success, but the weights' checksums (/weight_checker) "
            "did not change: the pod serves the weights it had"
        )
    journal.set(pod.address, PAUSED)  # the new weights are in: resuming is safe
    if version >= WEIGHT_VERSION:
        ask(pod, "POST", "/update_weight_version", t.step, body={"new_version": t.version},
            hint=DEV_MODE, ok=lambda a: field_of(a, "success") is True)  # fmt: skip
    _resume_intact(pod, t, journal, None)
    if version < WEIGHT_VERSION:
        return note or "loaded (this vLLM cannot say what it serves: the Job's record does)"
    served = _weight_version(pod, t, t.step)
    if served != t.version:
        raise Refused(f"loaded, but /weight_info reports weight_version {served!r}")
    return note or f"weight_version {served!r}"


def _resume_intact(pod: Pod, t: Target, journal: Journal, why: Exception | None) -> None:
    """Resume a pod whose weights are intact; a resume that fails leaves it paused, and
    recorded so, for the next sync to resume."""
    try:
        _resume(pod, t)
    except (Refused, Down) as exc:
        cause = f"{why}; then " if why is not None else ""
        raise Broken(f"{cause}{exc}: the pod is still paused; the next sync resumes it") from None
    journal.set(pod.address, None)
