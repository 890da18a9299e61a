"""Triton (>= 2.34, ``--model-control-mode=explicit``): a load that really reads the
weights, and the generation read back from the model's configuration.

From Triton's own source (server and core, r23.05 to r26.x; docs/engine-reload.md cites
the files): a ``load`` whose ``config`` equals the serving one, or differs from it only in
``instance_group``, is an instance-group update: HTTP 200, and no weight is read
(``model_lifecycle.cc``; ``EquivalentInNonInstanceGroupConfig`` in
``model_config_utils.cc``). So the config sent carries the generation as a model
parameter, ``standbyc_generation``: it differs from the serving one whenever the
generation does, which makes Triton load a new instance (reading the swapped-in
directory) beside the old one and swap it in; the old one serves until then, and on a
failure. The serving config then says which generation the pod serves.

``swap: unload-first`` unloads the model before loading it, for a model that does not
fit twice in the GPU's memory: the pod serves nothing between the two, and a load that
fails (after one more try) leaves it serving nothing.
"""

from __future__ import annotations

import json
import urllib.parse
from typing import Any

from compiler.engines import UNLOAD_FIRST
from compiler.weights.sync.reload.steps import (
    LOADING,
    Broken,
    Down,
    Entry,
    Journal,
    Probe,
    Target,
    ask,
    is_object,
    step_of,
)
from compiler.weights.sync.reload.wire import Answer, Pod, Refused

PARAMETER = "standbyc_generation"
EXPLICIT = {
    503: "Triton changes its models only when started with --model-control-mode=explicit",
    400: "Triton could not load the model; its message says why",
}


def _name(t: Target) -> str:
    return urllib.parse.quote(t.model, safe="")


def _config(pod: Pod, t: Target, seconds: float) -> dict[str, Any]:
    def is_config(a: Answer) -> bool:
        return is_object(a) and a.body.get("name") == t.model

    answer = ask(pod, "GET", f"/v2/models/{_name(t)}/config", seconds, ok=is_config)
    config: dict[str, Any] = answer.body
    return config


def generation_of(config: dict[str, Any]) -> str | None:
    params = config.get("parameters")
    value = params.get(PARAMETER) if isinstance(params, dict) else None
    found = value.get("string_value") if isinstance(value, dict) else None
    return found if isinstance(found, str) else None


def probe(pod: Pod, t: Target, entry: Entry | None) -> Probe:
    if step_of(entry) == LOADING and isinstance((entry or {}).get("config"), dict):
        # Unloaded by an earlier sync that was stopped: load it with the config it had.
        return Probe(False, "left unloaded by an earlier sync")
    served = generation_of(_config(pod, t, t.probe))
    return Probe(served == t.version, f"{PARAMETER} {served!r}")


def _load(pod: Pod, t: Target, config: dict[str, Any]) -> None:
    params = dict(config.get("parameters") or {})
    params[PARAMETER] = {"string_value": t.version}
    body = {"parameters": {"config": json.dumps({**config, "parameters": params})}}
    # Triton answers a load with an empty body; what it loaded is read back below.
    ask(pod, "POST", f"/v2/repository/models/{_name(t)}/load", t.timeout, body=body,
        hint=EXPLICIT)  # fmt: skip


def _unload_and_load(pod: Pod, t: Target, journal: Journal, config: dict[str, Any]) -> None:
    unloaded = journal.get(pod.address) is not None
    journal.set(pod.address, LOADING, config=config)
    if not unloaded:
        ask(pod, "POST", f"/v2/repository/models/{_name(t)}/unload", t.timeout,
            body={"parameters": {"unload_dependents": False}}, hint=EXPLICIT)  # fmt: skip
    try:
        _load(pod, t, config)
    except (Refused, Down) as first:
        try:
            _load(pod, t, config)
        except (Refused, Down) as second:
            raise Broken(
                f"unloaded, then the load failed twice ({first}; then {second}): the pod "
                "serves no model; restart it, or the next sync loads it again"
            ) from None


def load(pod: Pod, t: Target, journal: Journal, seen: Probe) -> str:
    entry = journal.get(pod.address)
    kept = (entry or {}).get("config")
    config = kept if isinstance(kept, dict) else _config(pod, t, t.step)
    if t.swap == UNLOAD_FIRST or isinstance(kept, dict):
        _unload_and_load(pod, t, journal, config)
    else:
        _load(pod, t, config)
    ask(pod, "GET", f"/v2/models/{_name(t)}/ready", t.step)
    served = generation_of(_config(pod, t, t.step))
    journal.set(pod.address, None)
    if served != t.version:
        raise Refused(f"Triton answered the load, but its config says {PARAMETER} {served!r}")
    return f"{PARAMETER} {served!r}"
