"""Engine pods for the reload tests, and the compiled Job's command pointed at them.

The pods are the tests' engines (tests/sync/engines/), one process per pod, each on its
own loopback address; the tier's headless Service name resolves to them through
/etc/hosts in the Job's own mount namespace, as a cluster's DNS resolves it to the ready
pods. Generations 41 and 42 of a small Hugging Face model are published to a store
served by nginx; the standbys hold 41 before each test.
"""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from tests.sync import hfmodel
from tests.sync.conftest import Nginx, compiled_into, free_port, job_command, publish, with_arg

REPO = Path(__file__).resolve().parents[3]
CASE = REPO / "tests/cases/engine-reload"
ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
MODEL = "llama"  # the Triton model's name in the case's spec


@dataclass
class Pod:
    engine: str  # sglang | vllm | triton
    address: str
    port: int
    log: Path
    proc: subprocess.Popen[bytes] | None = None
    args: list[str] = field(default_factory=list)

    def url(self, path: str) -> str:
        return f"http://{self.address}:{self.port}{path}"

    def rows(self) -> list[dict[str, Any]]:
        if not self.log.exists():
            return []
        return [json.loads(line) for line in self.log.read_text().splitlines()]

    def requests(self, path: str) -> list[dict[str, Any]]:
        """The requests to ``path`` as they arrived."""
        return [r for r in self.rows() if r["path"] == path and "done" not in r]

    def answered(self, path: str) -> list[dict[str, Any]]:
        return [r for r in self.rows() if r["path"] == path and "done" in r]

    def call(self, method: str, path: str, body: Any = None, timeout: float = 60) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(self.url(path), data, method=method,
                                     headers={"Content-Type": "application/json"})  # fmt: skip
        with urllib.request.urlopen(req, timeout=timeout) as resp:
            raw = resp.read()
        return json.loads(raw) if raw else None

    def serves(self) -> list[Any]:
        """The log-probabilities the pod computes for the prompt, asked through its own
        engine's inference route: which weights it really serves."""
        if self.engine == "sglang":
            ask = {"text": hfmodel.PROMPT, "return_logprob": True, "logprob_start_len": 0,
                   "sampling_params": {"max_new_tokens": 0}}  # fmt: skip
            doc = self.call("POST", "/generate", ask)
            rows: list[Any] = doc["meta_info"]["input_token_logprobs"]
            return rows
        if self.engine == "vllm":
            doc = self.call("POST", "/v1/completions", {"model": "m", "prompt": hfmodel.PROMPT,
                            "max_tokens": 1, "prompt_logprobs": 0})  # fmt: skip
            pl = doc["choices"][0]["prompt_logprobs"]
            return [None] + [next(iter(d.values()))["logprob"] for d in pl[1:]]
        doc = self.call("POST", f"/v2/models/{MODEL}/generate", {"text_input": hfmodel.PROMPT})
        triton_rows: list[Any] = doc["prompt_logprobs"]
        return triton_rows

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            self.proc.wait(timeout=20)


def _norm(engine: str, rows: list[Any]) -> list[Any]:
    """One shape for every engine's answer: the logprob of each prompt token."""
    if engine == "vllm":
        return rows
    return [None] + [r[0] for r in rows[1:]]


def start_pods(
    engine: str, port: int, model: Path, logs: Path, flags: dict[str, list[str]], *,
    env: dict[str, str] | None = None,
) -> list[Pod]:  # fmt: skip
    """The pods (address -> its own flags) of one engine, in one process."""
    pods = [Pod(engine, a, port, logs / f"{engine}-{a}.log") for a in flags]
    argv = [json.dumps(["--host", p.address, "--port", str(port), "--model-path", str(model),
                        "--log", str(p.log), *(["--model-name", MODEL] if engine == "triton"
                        else []), *flags[p.address]]) for p in pods]  # fmt: skip
    full_env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", **(env or {})}
    proc = subprocess.Popen([sys.executable, "-m", f"tests.sync.engines.{engine}", *argv],
                            cwd=REPO, env=full_env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE)  # fmt: skip
    for pod in pods:
        pod.proc = proc
    return pods


HEALTH = {"sglang": "/model_info", "vllm": "/version", "triton": "/v2/health/ready"}


def wait_ready(pods: list[Pod]) -> None:
    deadline = time.monotonic() + 120
    for pod in pods:
        while True:
            assert pod.proc is not None
            if pod.proc.poll() is not None:
                err = pod.proc.stderr.read().decode() if pod.proc.stderr else ""
                raise AssertionError(f"engine {pod.address} exited: {err[-2000:]}")
            try:
                urllib.request.urlopen(pod.url(HEALTH[pod.engine]), timeout=2).close()
                break
            except (OSError, urllib.error.HTTPError):
                assert time.monotonic() < deadline, f"engine {pod.address} did not start"
                time.sleep(0.2)


@pytest.fixture
def pods(tmp_path: Path) -> Iterator[Any]:
    """``pods(engine, port, model, {address: [flags]}, env=...)``: started in one process,
    ready; stopped after the test."""
    started: list[Pod] = []

    def start(engine: str, port: int, model: Path, flags: dict[str, list[str]],
              env: dict[str, str] | None = None) -> list[Pod]:  # fmt: skip
        new = start_pods(engine, port, model, tmp_path, flags, env=env)
        started.extend(new)
        wait_ready(new)
        return new

    yield start
    for pod in started:
        pod.stop()


@pytest.fixture(scope="session")
def hf(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    return hfmodel.build(tmp_path_factory.mktemp("hf-reload"))


@pytest.fixture(scope="session")
def reference(hf: dict[int, Path], tmp_path_factory: pytest.TempPathFactory) -> dict[int, Any]:
    """What an engine started on each generation's directory computes."""
    out = {}
    for g in (1, 2):
        (pod,) = start_pods("sglang", free_port(), hf[g], tmp_path_factory.mktemp("ref"),
                            {"127.0.0.9": []})  # fmt: skip
        try:
            wait_ready([pod])
            out[g] = _norm("sglang", pod.serves())
        finally:
            pod.stop()
    assert out[1] != out[2]
    return out


def serves(pod: Pod) -> list[Any]:
    return _norm(pod.engine, pod.serves())


@pytest.fixture(scope="session")
def case_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tests/cases/engine-reload compiled (without validation)."""
    return compiled_into(tmp_path_factory.mktemp("engine-reload") / "out", CASE / "spec.yaml")


@dataclass
class Tier:
    cmd: list[str]  # the compiled Job's command, its paths and the engines' port rewritten
    hosts: Path  # /etc/hosts for the Job: the Service name resolves to the pods
    weights: Path  # the claim
    target: Path  # the model directory the pods load
    plain: list[str]  # the command without its reload flags: a sync that asks no engine

    def run(
        self, cmd: list[str] | None = None, timeout: float = 300
    ) -> tuple[int, dict[str, Any], str]:
        proc = subprocess.run(self.in_cluster(cmd or self.cmd), capture_output=True, text=True,
                              timeout=timeout, check=False)  # fmt: skip
        doc = json.loads(proc.stdout) if proc.stdout.strip() else {}
        return proc.returncode, doc, proc.stderr + proc.stdout

    def in_cluster(self, cmd: list[str]) -> list[str]:
        """``cmd`` in a mount namespace of its own whose /etc/hosts resolves the tier's
        headless Service name to the pods."""
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mount --bind "$0" /etc/hosts && exec "$@"', str(self.hosts), *cmd]  # fmt: skip


@dataclass
class Seeds:
    """What every reload test starts from, made once per session: a store holding
    generations 41 and 42, and per compiled tier a claim whose model directory holds 41."""

    root: Path
    hf: dict[int, Path]
    synced: dict[tuple[str, str, str], Path] = field(default_factory=dict)

    @property
    def store(self) -> Path:
        store = self.root / "store"
        if not store.exists():
            publish(self.hf[1], store, 41)
            publish(self.hf[2], store, 42)
        return store

    def claim(self, key: tuple[str, str, str], plain: list[str], weights: Path) -> None:
        """Copy the tier's claim, synced to 41 by ``plain`` (the Job's command without
        its reload flags) the first time."""
        if key not in self.synced:
            made = self.root / f"claim-{len(self.synced)}"
            target = plain[plain.index("--target") + 1]
            cmd = with_arg(with_arg(plain, "--generation", "41"), "--target",
                           str(made / Path(target).relative_to(weights)))  # fmt: skip
            first = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
            assert first.returncode == 0, first.stderr
            self.synced[key] = made
        shutil.copytree(self.synced[key], weights, symlinks=True)


@pytest.fixture(scope="session")
def seeds(hf: dict[int, Path], tmp_path_factory: pytest.TempPathFactory) -> Seeds:
    return Seeds(tmp_path_factory.mktemp("seeds"), hf)


def compiled_tier(  # noqa: PLR0917 - where the Job comes from, then where it runs
    out: Path, spec_dir: str, tier: str, seeds: Seeds, nginx: Nginx, tmp_path: Path, *,
    port: int, addresses: tuple[str, ...] = ADDRESSES, pushgateway: str | None = None,
) -> Tier:  # fmt: skip
    """A tier whose standbys hold generation 41, and the compiled Job that brings it to 42."""
    shutil.copytree(seeds.store, nginx.root, dirs_exist_ok=True)
    weights = tmp_path / "weights"
    cmd = job_command(out, tier, source=nginx.url, weights=weights, pushgateway=pushgateway,
                      spec_dir=spec_dir, expect_pods=True)  # fmt: skip
    engines = urllib.parse.urlsplit(cmd[cmd.index("--engines") + 1])
    cmd = with_arg(cmd, "--engines", f"http://{engines.hostname}:{port}")
    model_path = cmd[cmd.index("--engine-model-path") + 1]
    target = weights / tier / Path(model_path).name
    cmd = with_arg(cmd, "--engine-model-path", str(target))
    hosts = tmp_path / "hosts"
    hosts.write_text("".join(f"{a} {engines.hostname}\n" for a in addresses))
    plain = cmd[: cmd.index("--reload")] + _after_reload(cmd)
    seeds.claim((str(out), spec_dir, tier), plain, weights)
    return Tier(cmd, hosts, weights, target, plain)


RELOAD_FLAGS = {"--reload", "--engines", "--engine-model-path", "--reload-timeout",
                "--max-unavailable", "--expect-pods", "--reload-deadline", "--engine-model",
                "--engine-swap"}  # fmt: skip


def _after_reload(cmd: list[str]) -> list[str]:
    """The command's arguments after ``--reload``, without the reload flags."""
    rest = cmd[cmd.index("--reload") :]
    out, skip = [], False
    for arg in rest:
        if skip:
            skip = False
            continue
        if arg in RELOAD_FLAGS:
            skip = True
            continue
        out.append(arg)
    return out


def outcomes(doc: dict[str, Any]) -> dict[str, str]:
    return {p["address"]: p["outcome"] for p in doc["reload"]["pods"]}


def overlapping(pods: list[Pod], path: str) -> bool:
    """Whether two pods were ever asked ``path`` at the same time."""
    spans = sorted((r["at"], r["done"]) for p in pods for r in p.answered(path))
    return any(b[0] < a[1] for a, b in itertools.pairwise(spans))
