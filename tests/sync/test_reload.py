"""Hot standbys load each generation without a restart: the compiled hot Job's command
syncs a Hugging Face model directory through nginx, then asks every engine pod of the
tier, found by resolving the tier's headless Service name, to load it. The pods are the
SGLang-shaped test engine (tests/sync/engine.py) on their own loopback addresses; the
name resolves to them through /etc/hosts in the Job's own mount namespace, as a
cluster's DNS resolves a headless Service to its ready pods.

Afterwards every pod must answer with the new generation's log-probabilities, bit for
bit those of an engine started on the new directory; the faults are a pod that refuses,
a pod that is down, a reload that takes too long, and a second sync while a reload runs.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.sync import hfmodel
from tests.sync.conftest import (
    Nginx,
    Pushgateway,
    free_port,
    job_command,
    publish,
    tree_bytes,
    with_arg,
)
from tests.sync.test_report import SPEC_DIR, _expected, _promtool_test

TARGET = "hot/llama-7b"
PUSHED = re.compile(r"^(standbyc_weights_\w+\{[^}]*\}) (\S+)$", re.MULTILINE)
POD_ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
REPO = Path(__file__).resolve().parents[2]


@dataclass
class Pod:
    address: str
    port: int
    log: Path
    proc: subprocess.Popen[bytes] | None

    def url(self, path: str) -> str:
        return f"http://{self.address}:{self.port}{path}"

    def requests(self, path: str) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        rows = [json.loads(line) for line in self.log.read_text().splitlines()]
        return [r for r in rows if r["path"] == path]

    def logprobs(self) -> list[Any]:
        body = {"text": hfmodel.PROMPT, "sampling_params": {"max_new_tokens": 0},
                "return_logprob": True, "logprob_start_len": 0}  # fmt: skip
        req = urllib.request.Request(self.url("/generate"), json.dumps(body).encode(),
                                     {"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(req, timeout=60) as resp:
            doc = json.loads(resp.read())
        rows: list[Any] = doc["meta_info"]["input_token_logprobs"]
        return rows

    def info(self) -> dict[str, Any]:
        with urllib.request.urlopen(self.url("/model_info"), timeout=10) as resp:
            doc: dict[str, Any] = json.loads(resp.read())
        return doc


def _start(address: str, port: int, model: Path, log: Path, *flags: str) -> Pod:
    cmd = [sys.executable, "-m", "tests.sync.engine", "--host", address, "--port", str(port),
           "--model-path", str(model), "--log", str(log), *flags]  # fmt: skip
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    return Pod(address, port, log, proc)


def _wait(pods: list[Pod]) -> None:
    deadline = time.monotonic() + 120
    for pod in pods:
        while True:
            assert pod.proc is not None
            if pod.proc.poll() is not None:
                err = pod.proc.stderr.read().decode() if pod.proc.stderr else ""
                raise AssertionError(f"engine {pod.address} exited: {err[-2000:]}")
            try:
                urllib.request.urlopen(pod.url("/health"), timeout=2).close()
                break
            except OSError:
                assert time.monotonic() < deadline, f"engine {pod.address} did not start"
                time.sleep(0.2)


@pytest.fixture
def engines(tmp_path: Path) -> Iterator[Any]:
    """Start engines: ``engines(port, model, {address: [flags]})``; all stopped after."""
    started: list[Pod] = []

    def start(port: int, model: Path, flags: dict[str, list[str]]) -> list[Pod]:
        pods = [_start(a, port, model, tmp_path / f"engine-{a}.log", *f) for a, f in flags.items()]
        started.extend(pods)
        _wait(pods)
        return pods

    yield start
    for pod in started:
        if pod.proc is not None:
            pod.proc.terminate()
            pod.proc.wait(timeout=20)


@pytest.fixture(scope="module")
def hf(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    return hfmodel.build(tmp_path_factory.mktemp("hf-reload"))


@pytest.fixture(scope="module")
def reference(hf: dict[int, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[int, Any]:
    """What an engine started on each generation's directory answers."""
    out = {}
    for g in (1, 2):
        pod = _start("127.0.0.9", free_port(), hf[g], tmp_path_factory.mktemp("ref") / "log")
        try:
            _wait([pod])
            out[g] = pod.logprobs()
        finally:
            assert pod.proc is not None
            pod.proc.terminate()
            pod.proc.wait(timeout=20)
    assert out[1] != out[2]
    return out


@dataclass
class Setup:
    cmd: list[str]  # the compiled hot Job's command, paths and the engines' port rewritten
    hosts: Path
    weights: Path


def _setup(
    hf: dict[int, Path], nginx: Nginx, compiled: Path, tmp_path: Path, *, port: int,
    addresses: tuple[str, ...] = POD_ADDRESSES, pushgateway: str | None = None,
) -> Setup:  # fmt: skip
    publish(hf[1], nginx.root, 41)
    publish(hf[2], nginx.root, 42)
    weights = tmp_path / "weights"
    cmd = job_command(compiled, "hot", source=nginx.url, weights=weights, pushgateway=pushgateway)
    engines_url = urllib.parse.urlsplit(cmd[cmd.index("--engines") + 1])
    assert engines_url.hostname == "inference-engine-hot-engines.inference-system.svc"
    cmd = with_arg(cmd, "--engines", f"http://{engines_url.hostname}:{port}")
    assert cmd[cmd.index("--engine-model-path") + 1] == "/models/llama-7b"
    cmd = with_arg(cmd, "--engine-model-path", str(weights / TARGET))
    hosts = tmp_path / "hosts"
    hosts.write_text("".join(f"{a} {engines_url.hostname}\n" for a in addresses))
    # The standbys hold generation 41 already (synced before they started).
    plain = cmd[: cmd.index("--reload")] + cmd[cmd.index("--reload-timeout") + 2 :]
    first = subprocess.run(with_arg(plain, "--generation", "41"), capture_output=True,
                           text=True, timeout=300, check=False)  # fmt: skip
    assert first.returncode == 0, first.stderr
    return Setup(cmd, hosts, weights)


def _in_cluster_dns(setup: Setup, cmd: list[str]) -> list[str]:
    """``cmd`` in a mount namespace of its own whose /etc/hosts resolves the tier's
    headless Service name to the pods."""
    return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
            'mount --bind "$0" /etc/hosts && exec "$@"', str(setup.hosts), *cmd]  # fmt: skip


def _run(setup: Setup, cmd: list[str] | None = None) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run(_in_cluster_dns(setup, cmd or setup.cmd), capture_output=True,
                          text=True, timeout=300, check=False)  # fmt: skip
    doc = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, doc, proc.stderr + proc.stdout


def _deployed_rule(compiled: Path, alert: str) -> dict[str, Any]:
    obj = yaml.safe_load(
        (compiled / SPEC_DIR / "prometheusrule-inference-engine-failover.yaml").read_text()
    )
    rule: dict[str, Any] = next(r for r in obj["spec"]["groups"][0]["rules"]
                                if r.get("alert") == alert)  # fmt: skip
    return rule


def _outcomes(doc: dict[str, Any]) -> dict[str, str]:
    return {p["address"]: p["outcome"] for p in doc["reload"]["pods"]}


def test_every_hot_pod_serves_the_new_generation_without_a_restart(
    *, hf: dict[int, Path], reference: dict[int, Any], nginx: Nginx, compiled: Path,
    pushgateway: Pushgateway, tmp_path: Path, engines: Any,
) -> None:  # fmt: skip
    port = free_port()
    setup = _setup(hf, nginx, compiled, tmp_path, port=port, pushgateway=pushgateway.url)
    pods = engines(port, setup.weights / TARGET, {a: [] for a in POD_ADDRESSES})
    assert all(p.logprobs() == reference[1] for p in pods)
    code, doc, err = _run(setup)
    assert code == 0, err
    assert tree_bytes(setup.weights / TARGET) == tree_bytes(hf[2])
    assert _outcomes(doc) == dict.fromkeys(POD_ADDRESSES, "loaded")
    assert doc["reload"]["served_generation"] == 42 and doc["reload"]["failed"] == 0
    for pod in pods:
        asked = pod.requests("/update_weights_from_disk")
        assert [r["body"] for r in asked] == [
            {"model_path": str(setup.weights / TARGET), "weight_version": "42"}
        ]
        assert pod.logprobs() == reference[2]  # bit for bit the new generation
        assert pod.info()["weight_version"] == "42"
    metrics = pushgateway.metrics()
    assert "standbyc_weights_served_generation{" in metrics
    served = [line for line in metrics.splitlines()
              if line.startswith("standbyc_weights_served_generation{")]  # fmt: skip
    assert len(served) == 1 and served[0].endswith(" 42") and 'tier="hot"' in served[0]
    failed = [line for line in metrics.splitlines()
              if line.startswith("standbyc_weights_reload_failed_pods{")]  # fmt: skip
    assert len(failed) == 1 and failed[0].endswith(" 0")

    # Run again: the disk is current and every pod says it serves 42; nobody is asked.
    code, doc, err = _run(setup)
    assert code == 0, err
    assert doc["status"] == "current"
    assert _outcomes(doc) == dict.fromkeys(POD_ADDRESSES, "current")
    assert all(len(p.requests("/update_weights_from_disk")) == 1 for p in pods)


def test_a_pod_that_refuses_or_is_down_does_not_stop_the_others(
    *, hf: dict[int, Path], reference: dict[int, Any], nginx: Nginx, compiled: Path,
    pushgateway: Pushgateway, tmp_path: Path, engines: Any,
) -> None:  # fmt: skip
    port = free_port()
    down = "127.0.0.5"  # listed by the name, nothing listens there
    setup = _setup(hf, nginx, compiled, tmp_path, port=port, addresses=(*POD_ADDRESSES, down),
                   pushgateway=pushgateway.url)  # fmt: skip
    flags = {a: (["--refuse"] if a == "127.0.0.3" else []) for a in POD_ADDRESSES}
    pods = engines(port, setup.weights / TARGET, flags)
    code, doc, err = _run(setup)
    assert code == 5, err  # on disk, but not every pod loaded it
    assert "generation 42 is on disk, but not every engine loaded it" in doc["error"]
    assert tree_bytes(setup.weights / TARGET) == tree_bytes(hf[2])
    assert _outcomes(doc) == {"127.0.0.2": "loaded", "127.0.0.3": "refused",
                              "127.0.0.4": "loaded", down: "unreachable"}  # fmt: skip
    refused = next(p for p in doc["reload"]["pods"] if p["address"] == "127.0.0.3")
    assert "HTTP 400: Failed to update weights: refused by the test engine." in refused["message"]
    assert doc["reload"]["failed"] == 2 and doc["reload"]["served_generation"] is None
    by_address = {p.address: p for p in pods}
    assert by_address["127.0.0.2"].logprobs() == reference[2]
    assert by_address["127.0.0.4"].logprobs() == reference[2]
    assert by_address["127.0.0.3"].logprobs() == reference[1]  # still the old one

    # What the Job pushed, exactly as the Pushgateway exposes it, fires the compiled alert.
    pushed = {m[1]: float(m[2]) for m in PUSHED.finditer(pushgateway.metrics())}
    assert pushed[next(k for k in pushed if k.startswith("standbyc_weights_served"))] == 0
    assert pushed[next(k for k in pushed if k.startswith("standbyc_weights_reload_failed"))] == 2
    rule = _deployed_rule(compiled, "StandbyServingOldWeights")
    labels = {"namespace": "inference-system", "standbyc_spec": "inference-engine", "tier": "hot"}
    expect = {"StandbyServingOldWeights": [_expected(rule, labels, 0, 2)]}
    result = _promtool_test(compiled, tmp_path, pushed, expect)
    assert result.returncode == 0, result.stdout + result.stderr

    # A rerun (the Job's retry) asks only the pods that did not confirm 42.
    code, doc, _ = _run(setup)
    assert code == 5
    assert _outcomes(doc) == {"127.0.0.2": "current", "127.0.0.3": "refused",
                              "127.0.0.4": "current", down: "unreachable"}  # fmt: skip


def test_a_reload_that_takes_too_long_is_reported(
    hf: dict[int, Path], nginx: Nginx, compiled: Path, tmp_path: Path, engines: Any
) -> None:
    port = free_port()
    setup = _setup(hf, nginx, compiled, tmp_path, port=port, addresses=POD_ADDRESSES[:2])
    engines(port, setup.weights / TARGET, {"127.0.0.2": [], "127.0.0.3": ["--reload-delay", "8"]})
    started = time.monotonic()
    code, doc, err = _run(setup, with_arg(setup.cmd, "--reload-timeout", "2"))
    took = time.monotonic() - started
    assert code == 5, err
    assert _outcomes(doc) == {"127.0.0.2": "loaded", "127.0.0.3": "timed out"}
    assert took < 8, took  # it did not wait for the slow pod


def test_a_second_sync_during_a_reload_waits_and_asks_nobody_twice(
    hf: dict[int, Path], nginx: Nginx, compiled: Path, tmp_path: Path, engines: Any
) -> None:
    port = free_port()
    setup = _setup(hf, nginx, compiled, tmp_path, port=port)
    slow = {a: ["--reload-delay", "3"] for a in POD_ADDRESSES}
    pods = engines(port, setup.weights / TARGET, slow)
    first = subprocess.Popen(_in_cluster_dns(setup, setup.cmd), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while not all(p.requests("/update_weights_from_disk") for p in pods):
        assert time.monotonic() < deadline and first.poll() is None
        time.sleep(0.05)
    code, doc, err = _run(setup)  # while the pods are still loading
    out, ferr = first.communicate(timeout=120)
    assert first.returncode == 0, ferr
    assert _outcomes(json.loads(out)) == dict.fromkeys(POD_ADDRESSES, "loaded")
    assert code == 0, err
    assert doc["status"] == "current"
    assert _outcomes(doc) == dict.fromkeys(POD_ADDRESSES, "current")
    assert all(len(p.requests("/update_weights_from_disk")) == 1 for p in pods)
