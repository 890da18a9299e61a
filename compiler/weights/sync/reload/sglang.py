"""SGLang (>= 0.5.6): load from disk, read the weight version back.

From SGLang's own source (0.5.6 to 0.5.23; docs/engine-reload.md cites the lines):
``POST /update_weights_from_disk`` takes the model-update writer lock, so requests in
flight finish and new ones wait while it loads; it answers ``{"success": true, ...}``
and sets the ``weight_version`` that ``GET /model_info`` reports. A successful update
also renames the served model to the path loaded (``tokenizer_manager.py``,
``_update_model_path_info``), so a pod started with ``--served-model-name X`` answers 404
for ``X`` afterwards: such a pod is refused before anything is asked of it.
"""

from __future__ import annotations

from compiler.weights.sync.reload.steps import (
    Entry,
    Journal,
    Probe,
    Target,
    ask,
    field_of,
    is_object,
)
from compiler.weights.sync.reload.wire import Answer, Pod, Refused

KEY_HINT = {
    401: "the server has --api-key or --admin-api-key set (SGLang >= 0.5.8); standbyc "
    "sends no key: leave them unset on standby pods, or use reload api restart",
}


def _info(pod: Pod, t: Target, seconds: float) -> Answer:
    # /model_info since SGLang 0.5.6 (/get_model_info before, deprecated after)
    return ask(pod, "GET", "/model_info", seconds, ok=is_object, hint=KEY_HINT)


def probe(pod: Pod, t: Target, entry: Entry | None) -> Probe:
    version = field_of(_info(pod, t, t.probe), "weight_version")
    return Probe(version == t.version, f"weight_version {version!r}")


def _served_name(pod: Pod, t: Target) -> None:
    models = ask(pod, "GET", "/v1/models", t.step, ok=is_object, hint=KEY_HINT)
    data = field_of(models, "data")
    names = [m.get("id") for m in data if isinstance(m, dict)] if isinstance(data, list) else []
    if names != [t.model_path]:
        raise Refused(
            f"the pod serves the model as {', '.join(map(repr, names)) or 'nothing'}; after a "
            f"reload SGLang serves it as {t.model_path!r} (the path it loaded), and clients "
            "asking for the old name get 404: start the engine without --served-model-name, "
            f"or with --served-model-name {t.model_path}"
        )


def load(pod: Pod, t: Target, journal: Journal, seen: Probe) -> str:
    _served_name(pod, t)
    body = {"model_path": t.model_path, "weight_version": t.version}
    ask(pod, "POST", "/update_weights_from_disk", t.timeout, body=body,
        ok=lambda a: field_of(a, "success") is True, hint=KEY_HINT)  # fmt: skip
    info = _info(pod, t, t.step)
    version, path = field_of(info, "weight_version"), field_of(info, "model_path")
    if version != t.version or path != t.model_path:
        raise Refused(
            f"/update_weights_from_disk answered success, but /model_info reports "
            f"weight_version {version!r} from {path!r}"
        )
    return f"weight_version {version!r}"
