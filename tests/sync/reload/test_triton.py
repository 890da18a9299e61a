"""Triton: the engine-reload case's warm tier (a new instance beside the old one) and
cold tier (unload first) against the Triton test engine (tests/sync/engines/triton.py),
whose load follows Triton's model lifecycle: a config that differs only in
instance_group, or not at all, reads no weights."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.sync.conftest import Nginx, free_port, with_arg
from tests.sync.reload.conftest import (
    ADDRESSES,
    MODEL,
    Pod,
    Seeds,
    compiled_tier,
    outcomes,
    overlapping,
    serves,
)

SPEC = "serving/engine-reload"
LOAD = f"/v2/repository/models/{MODEL}/load"


def _generation(pod: Pod) -> Any:
    params = pod.call("GET", f"/v2/models/{MODEL}/config").get("parameters") or {}
    return (params.get("standbyc_generation") or {}).get("string_value")


def test_the_models_own_config_sent_back_reads_no_weights(
    *, seeds: Seeds, reference: dict[int, Any], nginx: Nginx, case_out: Path,
    tmp_path: Path, pods: Any,
) -> None:  # fmt: skip
    """The negative control: a load with the serving config, unchanged or changed only in
    instance_group, is answered 200 while the old weights keep serving."""
    port = free_port()
    tier = compiled_tier(case_out, SPEC, "warm", seeds, nginx, tmp_path, port=port,
                         addresses=ADDRESSES[:1])  # fmt: skip
    (pod,) = pods("triton", port, tier.target, {ADDRESSES[0]: []})
    assert serves(pod) == reference[1]
    done = subprocess.run(tier.plain, capture_output=True, text=True, timeout=300, check=False)
    assert done.returncode == 0, done.stderr  # generation 42 is on disk now
    config = pod.call("GET", f"/v2/models/{MODEL}/config")
    regrouped = {**config, "instance_group": [{"kind": "KIND_MODEL", "count": 2}]}
    for sent in (config, regrouped):
        pod.call("POST", LOAD, {"parameters": {"config": json.dumps(sent)}})
    assert [r["status"] for r in pod.answered(LOAD)] == [200, 200]
    assert serves(pod) == reference[1]  # no weight was read

    code, _, err = tier.run(with_arg(tier.cmd, "--expect-pods", "1"))
    assert code == 0, err
    assert serves(pod) == reference[2] and _generation(pod) == "42"


def test_side_by_side_every_pod_serves_the_generation_it_reports(
    *, seeds: Seeds, reference: dict[int, Any], nginx: Nginx, case_out: Path,
    tmp_path: Path, pods: Any,
) -> None:  # fmt: skip
    port = free_port()
    tier = compiled_tier(case_out, SPEC, "warm", seeds, nginx, tmp_path, port=port,
                         addresses=ADDRESSES[:2])  # fmt: skip
    # The pods start on generation 41's directory, the target, which a full load reads again.
    slow = ["--reload-delay", "0.5"]
    started = pods("triton", port, tier.target, dict.fromkeys(ADDRESSES[:2], slow))
    assert all(serves(p) == reference[1] for p in started)
    code, doc, err = tier.run()
    assert code == 0, err
    assert outcomes(doc) == dict.fromkeys(ADDRESSES[:2], "loaded")
    assert not overlapping(started, LOAD)
    for pod in started:
        assert serves(pod) == reference[2]
        assert _generation(pod) == "42"
        assert pod.requests(f"/v2/repository/models/{MODEL}/unload") == []

    code, doc, err = tier.run()
    assert code == 0, err
    assert outcomes(doc) == dict.fromkeys(ADDRESSES[:2], "current")
    assert all(len(p.requests(LOAD)) == 1 for p in started)


def test_a_failed_side_by_side_load_keeps_the_old_instance_serving(
    *, seeds: Seeds, reference: dict[int, Any], nginx: Nginx, case_out: Path,
    tmp_path: Path, pods: Any,
) -> None:  # fmt: skip
    port = free_port()
    tier = compiled_tier(case_out, SPEC, "warm", seeds, nginx, tmp_path, port=port,
                         addresses=ADDRESSES[:2])  # fmt: skip
    flags = {ADDRESSES[0]: ["--refuse"], ADDRESSES[1]: []}
    refusing, other = pods("triton", port, tier.target, flags)
    code, doc, err = tier.run()
    assert code == 5, err
    assert outcomes(doc) == {ADDRESSES[0]: "refused", ADDRESSES[1]: "not asked"}
    assert "refused by the test engine" in doc["reload"]["pods"][0]["message"]
    assert serves(refusing) == reference[1] and serves(other) == reference[1]
    assert _generation(refusing) is None


def test_unload_first_loads_and_reads_back(
    *, seeds: Seeds, reference: dict[int, Any], nginx: Nginx, case_out: Path,
    tmp_path: Path, pods: Any,
) -> None:  # fmt: skip
    port = free_port()
    tier = compiled_tier(case_out, SPEC, "cold", seeds, nginx, tmp_path, port=port,
                         addresses=ADDRESSES[:1])  # fmt: skip
    assert tier.cmd[tier.cmd.index("--engine-swap") + 1] == "unload-first"
    (pod,) = pods("triton", port, tier.target, {ADDRESSES[0]: []})
    code, _, err = tier.run()
    assert code == 0, err
    unloads = pod.answered(f"/v2/repository/models/{MODEL}/unload")
    loads = pod.answered(LOAD)
    assert len(unloads) == 1 and len(loads) == 1 and unloads[0]["done"] <= loads[0]["at"]
    assert serves(pod) == reference[2] and _generation(pod) == "42"


def test_unload_first_killed_between_unload_and_load_is_loaded_by_the_next(
    *, seeds: Seeds, reference: dict[int, Any], nginx: Nginx, case_out: Path,
    tmp_path: Path, pods: Any,
) -> None:  # fmt: skip
    port = free_port()
    tier = compiled_tier(case_out, SPEC, "cold", seeds, nginx, tmp_path, port=port,
                         addresses=ADDRESSES[:1])  # fmt: skip
    (pod,) = pods("triton", port, tier.target, {ADDRESSES[0]: ["--reload-delay", "3"]})
    job = subprocess.Popen(tier.in_cluster(tier.cmd), stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 60
    while not pod.requests(LOAD):
        assert time.monotonic() < deadline
        time.sleep(0.05)
    pod.call("POST", f"/v2/repository/models/{MODEL}/unload")  # the load is lost with the Job
    job.kill()
    job.wait()
    code, doc, err = tier.run()
    assert code == 0, err
    assert outcomes(doc) == {ADDRESSES[0]: "loaded"}
    assert serves(pod) == reference[2] and _generation(pod) == "42"
