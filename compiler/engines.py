"""What compile and the weight-sync Job both know of each engine API: what asking a
tier's engines to load a generation may take at worst, and what the engine's server
must run with for it.

Compile gives the weight-sync Job a deadline that covers the whole sequence of every
engine it asks (and a grace period that lets a stopped Job finish the step it is in), and
says in its requires lines and PLAN.md what the engine pods need; the Job starts a pod's
sequence only when it can finish it before its own deadline. Each engine's sequence is
its requests, in order (docs/engine-reload.md): the long ones (a load, a drain) are
bounded by ``reload.timeout``, the others by ``step_seconds``.
"""

from __future__ import annotations

import math

STEP_CAP = 30  # the most a short request (a status, a config, a resume) may take
PROBE_CAP = 10  # the most one request asking a pod what it serves may take
PROBE_FANOUT = 64  # pods asked what they serve at once (asking changes nothing)
PROBE_REQUESTS = 3  # the most requests a probe makes (vLLM: version, pause state, weights)

UNLOAD_FIRST = "unload-first"  # Triton: unload, then load (the pod serves nothing meanwhile)

# engine (and Triton's swap) -> (long requests bounded by the reload timeout, short
# requests), at worst:
LONG_AND_SHORT: dict[str, tuple[int, int]] = {
    # /v1/models and /model_info; the load; /model_info again
    "sglang": (1, 3),
    # /version, /is_paused, checksums; the drain, the load and its one retry; resume,
    # the weight version set and read back, checksums again
    "vllm": (3, 7),
    # the config; the load; ready and the config read back
    "triton": (1, 3),
    # the config; the unload, the load and its one retry; ready and the config read back
    f"triton/{UNLOAD_FIRST}": (3, 3),
}


def step_seconds(timeout: float) -> float:
    return min(float(STEP_CAP), timeout)


def probe_seconds(timeout: float) -> float:
    return min(float(PROBE_CAP), timeout)


def _shape(api: str, swap: str) -> tuple[int, int]:
    return LONG_AND_SHORT[f"{api}/{swap}" if swap == UNLOAD_FIRST else api]


def sequence_seconds(api: str, timeout: float, swap: str = "") -> float:
    """One pod's whole sequence at worst: every request taking all it may."""
    long, short = _shape(api, swap)
    return long * timeout + short * step_seconds(timeout)


def waves(pods: int, max_unavailable: int) -> int:
    return math.ceil(pods / max(1, max_unavailable)) if pods > 0 else 0


def probe_phase_seconds(pods: int, timeout: float) -> float:
    """Asking every pod what it serves, at worst (a vLLM pod left paused is resumed)."""
    rounds = math.ceil(max(1, pods) / PROBE_FANOUT)
    return rounds * (PROBE_REQUESTS * probe_seconds(timeout) + step_seconds(timeout))


def tier_seconds(
    api: str, timeout: float, pods: int, max_unavailable: int, swap: str = ""
) -> float:
    """A tier's whole reload at worst: asking every pod what it serves, then every wave."""
    each = sequence_seconds(api, timeout, swap)
    return probe_phase_seconds(pods, timeout) + waves(pods, max_unavailable) * each


def grace_seconds(api: str, timeout: float, swap: str = "") -> float:
    """What a Job stopped mid-wave needs to end cleanly: finish the long request it is
    in, then resume and record (vLLM's drain or load; Triton's load after an unload)."""
    long, _ = _shape(api, swap)
    return (timeout if long else 0.0) + 2 * step_seconds(timeout)


def max_unavailable(value: int | str, replicas: int) -> int:
    """Pods asked at once: a number, or a share of the replicas rounded down (as a
    Deployment's rolling update rounds maxUnavailable), at least one."""
    if isinstance(value, str):
        return max(1, replicas * int(value.rstrip("%")) // 100)
    return max(1, value)


# What a weight-sync Job keeps for itself besides the downloads: its report, and the
# least the downloads may be given.
REPORT_SECONDS = 60
MIN_SYNC_SECONDS = 60
DEFAULT_JOB_SECONDS = 30 * 60


def serves_while_loading(api: str, swap: str) -> bool:
    """Whether a pod keeps serving (the old weights) while it loads the new ones: only
    Triton's side-by-side load, whose old instance serves until the new one is ready."""
    return api == "triton" and swap != UNLOAD_FIRST


def server_needs(api: str, model_path: str, generation_file: str) -> str:
    """What the engine's server must run with for the weight-sync Job's reload to be safe
    and true (docs/engine-reload.md says why for each)."""
    if api == "sglang":
        return (
            "SGLang >= 0.5.6, started with --model-path " + model_path + " and no "
            "--served-model-name (or --served-model-name " + model_path + "; a reload renames "
            'the served model to the path it loads), with --weight-version "$(cat '
            + generation_file
            + ')" (a pod started after a swap then reports the generation it loaded and is '
            "not asked again), without --api-key or --admin-api-key (SGLang >= 0.5.8 asks a "
            "key of the reload; standbyc sends none), and with "
            "SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0 if a liveness probe uses /health (by "
            "default /health waits behind a reload and answers 503 after 20 s)"
        )
    if api == "vllm":
        return (
            "vLLM >= 0.16.0 (older /pause aborts the requests in flight), started with "
            "VLLM_SERVER_DEV_MODE=1 in its environment (/pause, /resume, /collective_rpc, "
            "/is_paused and /weight_info exist only then); a pod in its wave holds new "
            "requests, and from vLLM 0.33.0 answers them 503, until it is resumed"
        )
    return (
        "Triton >= 2.34 started with --model-control-mode=explicit, its model's model.json "
        '"model" set to ' + model_path + " (the vLLM backend reads the weights from there); "
        "a load sends the model's config with the parameter standbyc_generation, and the "
        "pod's config then says which generation it serves"
    )
