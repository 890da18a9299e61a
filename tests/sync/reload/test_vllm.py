"""vLLM: the engine-reload case's hot tier (vLLM, two pods at a time) against the vLLM test
engine (tests/sync/engines/vllm.py), whose pause and reload follow vLLM's source. Each
test asserts what every pod serves afterwards and that none is left paused unless its
weights are unknown."""

from __future__ import annotations

import json
import signal
import subprocess
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.sync import hfmodel
from tests.sync.conftest import Nginx, free_port, with_arg
from tests.sync.reload.conftest import (
    ADDRESSES,
    Pod,
    Seeds,
    Tier,
    compiled_tier,
    outcomes,
    overlapping,
    serves,
)

SPEC = "serving/engine-reload"


def _tier(seeds: Seeds, nginx: Nginx, case_out: Path, tmp_path: Path, *, port: int,
          addresses: tuple[str, ...] = ADDRESSES) -> Tier:  # fmt: skip
    tier = compiled_tier(case_out, SPEC, "hot", seeds, nginx, tmp_path, port=port,
                         addresses=addresses)  # fmt: skip
    tier.cmd = with_arg(tier.cmd, "--expect-pods", str(len(addresses)))
    return tier


def _paused(pod: Pod) -> bool:
    return bool(pod.call("GET", "/is_paused")["is_paused"])


@pytest.mark.parametrize("version", ["0.16.0", "0.27.0", "0.34.0"])
def test_every_pod_serves_the_new_generation_and_none_stays_paused(
    version: str, *, seeds: Seeds, reference: dict[int, Any], nginx: Nginx,
    case_out: Path, tmp_path: Path, pods: Any,
) -> None:  # fmt: skip
    port = free_port()
    tier = _tier(seeds, nginx, case_out, tmp_path, port=port)
    flags = ["--version", version, "--reload-delay", "0.5"]
    started = pods("vllm", port, tier.target, dict.fromkeys(ADDRESSES, flags))
    if version >= "0.27.0":  # they were loaded generation 41 by an earlier sync
        for pod in started:
            pod.call("POST", "/update_weight_version", {"new_version": "41"})
    code, doc, err = tier.run()
    assert code == 0, err
    assert outcomes(doc) == dict.fromkeys(ADDRESSES, "loaded")
    assert [w["pods"] for w in doc["reload"]["waves"]] == [list(ADDRESSES[:2]), [ADDRESSES[2]]]
    for pod in started:
        assert serves(pod) == reference[2]
        assert not _paused(pod)
        assert [r["query"] for r in pod.requests("/pause")] == [{"mode": "wait"}]
        assert len(pod.requests("/resume")) == 1
    # Two at a time: the third pod's load never overlaps the first wave's.
    assert not overlapping([started[0], started[2]], "/collective_rpc")
    if version >= "0.27.0":
        assert all(p.call("GET", "/weight_info")["weight_version"] == "42" for p in started)
    if version == "0.34.0":  # the weights' checksums were compared, before and after
        assert all(len(p.requests("/weight_checker")) == 2 for p in started)

    # Again: nobody is paused or asked, whether the pods can say (0.27 on) or the record does.
    code, doc, err = tier.run()
    assert code == 0, err
    assert outcomes(doc) == dict.fromkeys(ADDRESSES, "current")
    assert all(len(p.requests("/pause")) == 1 for p in started)


def test_a_load_that_changes_no_weight_is_refused_and_the_pod_resumed(
    *, seeds: Seeds, reference: dict[int, Any], nginx: Nginx, case_out: Path,
    tmp_path: Path, pods: Any,
) -> None:  # fmt: skip
    """An engine that answers reload_weights with success and loads nothing: from 0.33.0
    its checksums say so."""
    port = free_port()
    tier = _tier(seeds, nginx, case_out, tmp_path, port=port, addresses=ADDRESSES[:1])
    (pod,) = pods("vllm", port, tier.target, {ADDRESSES[0]: ["--no-op-reloads"]})
    pod.call("POST", "/update_weight_version", {"new_version": "41"})
    code, doc, err = tier.run()
    assert code == 5, err
    (result,) = doc["reload"]["pods"]
    assert result["outcome"] == "refused" and "checksums" in result["message"]
    assert not _paused(pod) and serves(pod) == reference[1]
    assert pod.call("GET", "/weight_info")["weight_version"] == "41"


def test_a_version_whose_pause_aborts_requests_is_refused_before_anything(
    *, seeds: Seeds, reference: dict[int, Any], nginx: Nginx, case_out: Path,
    tmp_path: Path, pods: Any,
) -> None:  # fmt: skip
    port = free_port()
    tier = _tier(seeds, nginx, case_out, tmp_path, port=port, addresses=ADDRESSES[:1])
    (pod,) = pods("vllm", port, tier.target, {ADDRESSES[0]: ["--version", "0.14.1"]})
    code, doc, err = tier.run()
    assert code == 5, err
    (result,) = doc["reload"]["pods"]
    assert result["outcome"] == "refused" and "mode=wait arrived in 0.16.0" in result["message"]
    assert pod.requests("/pause") == [] and pod.requests("/collective_rpc") == []
    assert serves(pod) == reference[1]


def test_without_dev_mode_the_message_names_the_route_and_the_flag(
    *, seeds: Seeds, nginx: Nginx, case_out: Path, tmp_path: Path, pods: Any
) -> None:
    port = free_port()
    tier = _tier(seeds, nginx, case_out, tmp_path, port=port, addresses=ADDRESSES[:1])
    pods("vllm", port, tier.target, {ADDRESSES[0]: []}, env={"VLLM_SERVER_DEV_MODE": "0"})
    code, doc, err = tier.run()
    assert code == 5, err
    (result,) = doc["reload"]["pods"]
    assert "GET /is_paused: HTTP 404" in result["message"]
    assert "VLLM_SERVER_DEV_MODE=1" in result["message"]


def test_a_reload_that_fails_once_is_tried_again_from_the_same_directory(
    *, seeds: Seeds, reference: dict[int, Any], nginx: Nginx, case_out: Path,
    tmp_path: Path, pods: Any,
) -> None:  # fmt: skip
    port = free_port()
    tier = _tier(seeds, nginx, case_out, tmp_path, port=port, addresses=ADDRESSES[:1])
    (pod,) = pods("vllm", port, tier.target, {ADDRESSES[0]: ["--fail-reloads", "1"]})
    code, doc, err = tier.run()
    assert code == 0, err
    assert "second try" in doc["reload"]["pods"][0]["message"]
    assert len(pod.requests("/collective_rpc")) == 2
    assert serves(pod) == reference[2] and not _paused(pod)


def test_a_reload_that_fails_twice_leaves_the_pod_paused_never_resumed_onto_it(
    *, seeds: Seeds, reference: dict[int, Any], nginx: Nginx, case_out: Path,
    tmp_path: Path, pods: Any,
) -> None:  # fmt: skip
    port = free_port()
    tier = _tier(seeds, nginx, case_out, tmp_path, port=port, addresses=ADDRESSES[:2])
    flags = {ADDRESSES[0]: ["--fail-reloads", "2"], ADDRESSES[1]: []}
    broken, fine = pods("vllm", port, tier.target, flags)
    code, doc, err = tier.run()
    assert code == 5, err
    assert outcomes(doc) == {ADDRESSES[0]: "out of service", ADDRESSES[1]: "loaded"}
    assert "restart it" in doc["reload"]["pods"][0]["message"]
    assert _paused(broken) and broken.requests("/resume") == []  # no request meets its weights
    assert serves(fine) == reference[2] and not _paused(fine)

    # The next sync loads it again from the same verified directory, then resumes it.
    code, doc, err = tier.run()
    assert code == 0, err
    assert outcomes(doc) == {ADDRESSES[0]: "loaded", ADDRESSES[1]: "current"}
    assert len(broken.requests("/pause")) == 1  # it was still paused: not paused again
    assert not _paused(broken) and serves(broken) == reference[2]


def test_a_drain_longer_than_the_timeout_resumes_the_pod(
    *, seeds: Seeds, reference: dict[int, Any], nginx: Nginx, case_out: Path,
    tmp_path: Path, pods: Any,
) -> None:  # fmt: skip
    port = free_port()
    tier = _tier(seeds, nginx, case_out, tmp_path, port=port, addresses=ADDRESSES[:1])
    (pod,) = pods("vllm", port, tier.target, {ADDRESSES[0]: ["--request-delay", "8"]})
    client = threading.Thread(target=serves, args=(pod,))  # a request in flight, 8 s long
    client.start()
    time.sleep(0.5)
    started = time.monotonic()
    code, doc, err = tier.run(with_arg(tier.cmd, "--reload-timeout", "2"))
    assert time.monotonic() - started < 8 + 30
    client.join()
    assert code == 5, err
    (result,) = doc["reload"]["pods"]
    assert result["outcome"] == "timed out" and "POST /pause?mode=wait" in result["message"]
    assert pod.requests("/collective_rpc") == []
    assert not _paused(pod) and serves(pod) == reference[1]


def _wait_for(pod: Pod, path: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not pod.requests(path):
        assert time.monotonic() < deadline, f"{path} never asked"
        time.sleep(0.05)


def test_a_job_stopped_mid_reload_leaves_no_pod_paused(
    *, seeds: Seeds, reference: dict[int, Any], nginx: Nginx, case_out: Path,
    tmp_path: Path, pods: Any,
) -> None:  # fmt: skip
    """SIGTERM (the Job's deadline, its pod deleted) while the first wave loads: the wave
    finishes, its pods are resumed, and no later wave starts."""
    port = free_port()
    tier = _tier(seeds, nginx, case_out, tmp_path, port=port)
    started = pods("vllm", port, tier.target, {a: ["--reload-delay", "3"] for a in ADDRESSES})
    job = subprocess.Popen(tier.in_cluster(tier.cmd), stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True)  # fmt: skip
    _wait_for(started[0], "/collective_rpc")
    job.send_signal(signal.SIGTERM)  # to unshare, which passes it on through exec
    out, err = job.communicate(timeout=120)
    assert job.returncode == 5, err
    doc = json.loads(out)
    assert outcomes(doc) == {ADDRESSES[0]: "loaded", ADDRESSES[1]: "loaded",
                             ADDRESSES[2]: "not asked"}  # fmt: skip
    assert not any(_paused(p) for p in started)
    assert [serves(p) for p in started] == [reference[2], reference[2], reference[1]]


def test_a_job_killed_mid_reload_is_undone_by_the_next(
    *, seeds: Seeds, reference: dict[int, Any], nginx: Nginx, case_out: Path,
    tmp_path: Path, pods: Any,
) -> None:  # fmt: skip
    """SIGKILL (out of memory, a node lost) mid-load leaves the pod paused with weights
    nobody knows; the next sync reloads it before resuming it."""
    port = free_port()
    tier = _tier(seeds, nginx, case_out, tmp_path, port=port, addresses=ADDRESSES[:1])
    (pod,) = pods("vllm", port, tier.target, {ADDRESSES[0]: ["--reload-delay", "2"]})
    job = subprocess.Popen(tier.in_cluster(tier.cmd), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)  # fmt: skip
    _wait_for(pod, "/collective_rpc")
    job.kill()
    job.wait()
    time.sleep(3)  # the engine finished that load; nobody resumed it
    assert _paused(pod)
    code, doc, err = tier.run()
    assert code == 0, err
    assert outcomes(doc) == {ADDRESSES[0]: "loaded"}
    assert len(pod.requests("/pause")) == 1 and len(pod.requests("/collective_rpc")) == 2
    assert not _paused(pod) and serves(pod) == reference[2]


def test_from_0_33_new_requests_get_503_during_the_reload(
    *, seeds: Seeds, nginx: Nginx, case_out: Path, tmp_path: Path, pods: Any
) -> None:
    """What docs/engine-reload.md tells users: a pod in its wave answers 503."""
    port = free_port()
    tier = _tier(seeds, nginx, case_out, tmp_path, port=port, addresses=ADDRESSES[:1])
    (pod,) = pods("vllm", port, tier.target, {ADDRESSES[0]: ["--reload-delay", "3"]})
    job = subprocess.Popen(tier.in_cluster(tier.cmd), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)  # fmt: skip
    _wait_for(pod, "/collective_rpc")
    body = json.dumps({"model": "m", "prompt": hfmodel.PROMPT, "max_tokens": 1}).encode()
    req = urllib.request.Request(pod.url("/v1/completions"), body,
                                 {"Content-Type": "application/json"})  # fmt: skip
    with pytest.raises(urllib.error.HTTPError) as answer:
        urllib.request.urlopen(req, timeout=10)
    assert answer.value.code == 503
    assert job.wait(timeout=120) == 0
