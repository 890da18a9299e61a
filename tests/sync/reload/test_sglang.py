"""SGLang: the example spec's hot tier (three pods, one at a time) against the SGLang test
engine (tests/sync/engines/sglang.py). Each test asserts what every pod ends up serving,
read through its own inference route, not what the Job printed."""

from __future__ import annotations

import json
import re
import subprocess
import time
import urllib.error
from pathlib import Path
from typing import Any

from tests.sync.conftest import Nginx, Pushgateway, free_port, tree_bytes, with_arg
from tests.sync.reload.conftest import (
    ADDRESSES,
    Seeds,
    compiled_tier,
    outcomes,
    overlapping,
    serves,
)
from tests.sync.test_report import SPEC_DIR, _expected, _promtool_test

PUSHED = re.compile(r"^(standbyc_weights_\w+\{[^}]*\}) (\S+)$", re.MULTILINE)
EXAMPLE = "inference-system/inference-engine"


def _tier(seeds: Seeds, nginx: Nginx, compiled: Path, tmp_path: Path, *, port: int,
          **kw: Any) -> Any:  # fmt: skip
    return compiled_tier(compiled, EXAMPLE, "hot", seeds, nginx, tmp_path, port=port, **kw)


def test_every_pod_serves_the_new_generation_one_pod_at_a_time(
    *, seeds: Seeds, reference: dict[int, Any], nginx: Nginx, compiled: Path,
    pushgateway: Pushgateway, tmp_path: Path, pods: Any,
) -> None:  # fmt: skip
    port = free_port()
    tier = _tier(seeds, nginx, compiled, tmp_path, port=port, pushgateway=pushgateway.url)
    slow = ["--reload-delay", "0.5"]
    started = pods("sglang", port, tier.target, dict.fromkeys(ADDRESSES, slow))
    assert all(serves(p) == reference[1] for p in started)
    code, doc, err = tier.run()
    assert code == 0, err
    assert tree_bytes(tier.target) == tree_bytes(seeds.hf[2])
    assert outcomes(doc) == dict.fromkeys(ADDRESSES, "loaded")
    assert doc["reload"]["served_generation"] == 42 and doc["reload"]["failed"] == 0
    assert [w["pods"] for w in doc["reload"]["waves"]] == [[a] for a in ADDRESSES]
    assert not overlapping(started, "/update_weights_from_disk")  # never two pods at once
    for pod in started:
        asked = pod.requests("/update_weights_from_disk")
        assert [r["body"] for r in asked] == [
            {"model_path": str(tier.target), "weight_version": "42"}
        ]
        assert serves(pod) == reference[2]  # bit for bit the new generation
        assert pod.call("GET", "/model_info")["weight_version"] == "42"
    served = [line for line in pushgateway.metrics().splitlines()
              if line.startswith("standbyc_weights_served_generation{")]  # fmt: skip
    assert len(served) == 1 and served[0].endswith(" 42") and 'tier="hot"' in served[0]

    # Again: the disk is current and every pod says it serves 42; nobody is asked.
    code, doc, err = tier.run()
    assert code == 0, err
    assert doc["status"] == "current"
    assert outcomes(doc) == dict.fromkeys(ADDRESSES, "current")
    assert all(len(p.requests("/update_weights_from_disk")) == 1 for p in started)


def test_a_pod_started_after_the_swap_with_the_generation_file_is_not_asked_again(
    *, seeds: Seeds, reference: dict[int, Any], nginx: Nginx, compiled: Path,
    tmp_path: Path, pods: Any,
) -> None:  # fmt: skip
    port = free_port()
    tier = _tier(seeds, nginx, compiled, tmp_path, port=port, addresses=ADDRESSES[:1])
    code, doc, err = tier.run()  # no pod is ready: the name resolves to one that is down
    generation_file = tier.target.parent / ".standbyc" / tier.target.name / "generation"
    assert generation_file.read_text() == "42\n"
    assert oct(generation_file.stat().st_mode & 0o777) == "0o644"
    # The pod starts now, as the docs say: --weight-version "$(cat <that file>)".
    flags = ["--weight-version", generation_file.read_text().strip()]
    (pod,) = pods("sglang", port, tier.target, {ADDRESSES[0]: flags})
    assert serves(pod) == reference[2]
    code, doc, err = tier.run()
    assert code == 5, err  # 3 replicas, 1 ready pod: two are unknown
    assert outcomes(doc) == {ADDRESSES[0]: "current"}
    assert pod.requests("/update_weights_from_disk") == []


def test_a_refusal_stops_the_waves_and_the_rest_keep_serving(
    *, seeds: Seeds, reference: dict[int, Any], nginx: Nginx, compiled: Path,
    pushgateway: Pushgateway, tmp_path: Path, pods: Any,
) -> None:  # fmt: skip
    port = free_port()
    down = "127.0.0.5"  # listed by the name, nothing listens there
    tier = _tier(seeds, nginx, compiled, tmp_path, port=port, addresses=(down, *ADDRESSES),
                 pushgateway=pushgateway.url)  # fmt: skip
    flags = {a: (["--refuse"] if a == "127.0.0.3" else []) for a in ADDRESSES}
    started = {p.address: p for p in pods("sglang", port, tier.target, flags)}
    code, doc, err = tier.run()
    assert code == 5, err  # on disk, but not every pod loaded it
    assert "generation 42 is on disk, but not every engine loaded it" in doc["error"]
    assert outcomes(doc) == {"127.0.0.2": "loaded", "127.0.0.3": "refused",
                             "127.0.0.4": "not asked", down: "unreachable"}  # fmt: skip
    refused = next(p for p in doc["reload"]["pods"] if p["address"] == "127.0.0.3")
    assert "Failed to update weights: refused by the test engine." in refused["message"]
    assert serves(started["127.0.0.2"]) == reference[2]
    assert serves(started["127.0.0.3"]) == reference[1]
    assert serves(started["127.0.0.4"]) == reference[1]  # never asked: keeps serving
    assert started["127.0.0.4"].requests("/update_weights_from_disk") == []
    assert doc["reload"]["failed"] == 3 and doc["reload"]["served_generation"] is None

    pushed = {m[1]: float(m[2]) for m in PUSHED.finditer(pushgateway.metrics())}
    assert pushed[next(k for k in pushed if k.startswith("standbyc_weights_served"))] == 0
    assert pushed[next(k for k in pushed if k.startswith("standbyc_weights_reload_failed"))] == 3
    rule = _rule(compiled, "StandbyServingOldWeights")
    labels = {"namespace": "inference-system", "standbyc_spec": "inference-engine", "tier": "hot"}
    expect = {"StandbyServingOldWeights": [_expected(rule, labels, 0, 3)]}
    result = _promtool_test(compiled, tmp_path, pushed, expect)
    assert result.returncode == 0, result.stdout + result.stderr


def _rule(compiled: Path, alert: str) -> dict[str, Any]:
    import yaml  # noqa: PLC0415

    obj = yaml.safe_load(
        (compiled / SPEC_DIR / "prometheusrule-inference-engine-failover.yaml").read_text()
    )
    rule: dict[str, Any] = next(r for r in obj["spec"]["groups"][0]["rules"]
                                if r.get("alert") == alert)  # fmt: skip
    return rule


def test_a_pod_serving_another_name_is_refused_before_it_is_asked(
    *, seeds: Seeds, reference: dict[int, Any], nginx: Nginx, compiled: Path,
    tmp_path: Path, pods: Any,
) -> None:  # fmt: skip
    port = free_port()
    tier = _tier(seeds, nginx, compiled, tmp_path, port=port, addresses=ADDRESSES[:1])
    (pod,) = pods("sglang", port, tier.target, {ADDRESSES[0]: ["--served-model-name", "llama"]})
    code, doc, err = tier.run(with_arg(tier.cmd, "--expect-pods", "1"))
    assert code == 5, err
    (result,) = doc["reload"]["pods"]
    assert result["outcome"] == "refused"
    assert "--served-model-name" in result["message"] and "'llama'" in result["message"]
    assert pod.requests("/update_weights_from_disk") == []
    assert serves(pod) == reference[1]
    assert pod.call("GET", "/v1/models")["data"][0]["id"] == "llama"  # clients still reach it


def test_health_blocks_behind_a_load_unless_generation_is_off(
    *, seeds: Seeds, nginx: Nginx, compiled: Path, tmp_path: Path, pods: Any
) -> None:
    """Why the docs give liveness probes SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=0: by
    default /health waits behind the load's writer lock and answers 503."""
    port = free_port()
    tier = _tier(seeds, nginx, compiled, tmp_path, port=port, addresses=ADDRESSES[:2])
    slow = ["--reload-delay", "4"]
    (blocking,) = pods("sglang", port, tier.target, {ADDRESSES[0]: slow},
                       env={"SGLANG_HEALTH_CHECK_TIMEOUT": "1"})  # fmt: skip
    (safe,) = pods("sglang", port, tier.target, {ADDRESSES[1]: slow},
                   env={"SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION": "0"})  # fmt: skip
    job = subprocess.Popen(tier.in_cluster(with_arg(tier.cmd, "--max-unavailable", "2")),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    deadline = time.monotonic() + 60
    while not all(p.requests("/update_weights_from_disk") for p in (blocking, safe)):
        assert time.monotonic() < deadline and job.poll() is None
        time.sleep(0.05)
    statuses = {}
    for pod in (blocking, safe):
        try:
            pod.call("GET", "/health", timeout=10)
            statuses[pod.address] = 200
        except urllib.error.HTTPError as exc:
            statuses[pod.address] = exc.code
    job.communicate(timeout=120)
    assert statuses == {blocking.address: 503, safe.address: 200}


def test_a_load_longer_than_the_timeout_is_reported_and_ends_the_waves(
    *, seeds: Seeds, reference: dict[int, Any], nginx: Nginx, compiled: Path, tmp_path: Path,
    pods: Any,
) -> None:  # fmt: skip
    port = free_port()
    tier = _tier(seeds, nginx, compiled, tmp_path, port=port, addresses=ADDRESSES[:2])
    _, other = pods("sglang", port, tier.target,
                       {ADDRESSES[0]: ["--reload-delay", "8"], ADDRESSES[1]: []})  # fmt: skip
    code, doc, err = tier.run(with_arg(with_arg(tier.cmd, "--reload-timeout", "2"),
                                       "--expect-pods", "2"))  # fmt: skip
    assert code == 5, err
    assert outcomes(doc) == {ADDRESSES[0]: "timed out", ADDRESSES[1]: "not asked"}
    assert "no whole answer in 2 s" in doc["reload"]["pods"][0]["message"]
    assert doc["reload"]["seconds"] < 8  # it did not wait for the slow pod
    assert other.requests("/update_weights_from_disk") == []
    assert serves(other) == reference[1]


def test_a_second_sync_during_a_reload_waits_and_asks_nobody_twice(
    *, seeds: Seeds, nginx: Nginx, compiled: Path, tmp_path: Path, pods: Any
) -> None:
    port = free_port()
    tier = _tier(seeds, nginx, compiled, tmp_path, port=port)
    slow = ["--reload-delay", "2"]
    started = pods("sglang", port, tier.target, dict.fromkeys(ADDRESSES, slow))
    first = subprocess.Popen(tier.in_cluster(tier.cmd), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while not started[0].requests("/update_weights_from_disk"):
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.05)
    code, doc, err = tier.run()  # while the first is in its waves
    out, ferr = first.communicate(timeout=120)
    assert first.returncode == 0, ferr
    assert set(outcomes(json.loads(out)).values()) == {"loaded"}
    assert code == 0, err
    assert doc["status"] == "current"
    assert outcomes(doc) == dict.fromkeys(ADDRESSES, "current")
    assert all(len(p.requests("/update_weights_from_disk")) == 1 for p in started)
