"""Fixtures for the weight-sync tests: real servers (tests/servers.py), checkpoints of
several generations, and the compiled Jobs' exact commands.

A missing server is a failure, not a skip: `make test` installs every one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
import yaml  # PyYAML: read files as the cluster would (YAML 1.1)

from compiler.api import compile_tree
from compiler.weights.testing import rl_pair, transformer_specs
from tests.conftest import REPO
from tests.faultserver import FaultServer
from tests.servers import Nginx, Pushgateway, ServerMissing, free_port, start_pushgateway
from tests.sync.signing import Keys, Listener, make_keys

if TYPE_CHECKING:
    from tests.sync.s3bucket import S3

STANDBYC = Path(sys.executable).with_name("standbyc")  # the console script, as in the image
MODEL = "llama-7b"  # the example spec's model.name: what signed generations are of


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[Nginx]:
    server = Nginx(tmp_path / "store", tmp_path / "nginx", free_port())
    server.root.mkdir()
    try:
        server.start()
    except ServerMissing as exc:
        pytest.fail(str(exc))
    yield server
    server.stop()


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[S3]:
    """A private bucket of a real S3 server (tests/sync/s3bucket.py)."""
    from tests.sync.s3bucket import serve  # noqa: PLC0415 - it imports this module

    yield from serve(tmp_path)


@pytest.fixture
def pushgateway(tmp_path: Path) -> Iterator[Pushgateway]:
    try:
        server = start_pushgateway(tmp_path)
    except ServerMissing as exc:
        pytest.fail(str(exc))
    yield server
    server.proc.terminate()
    server.proc.wait(timeout=10)


# --- checkpoints ---------------------------------------------------------------------------

SPECS = transformer_specs(layers=2, hidden=384, vocab=6000)


@pytest.fixture(scope="session")
def generations(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Generations 1..5 of a bf16 model, each one RL step after the previous one (~10 MB),
    each a lone ``model.safetensors`` (published as a directory of that one file)."""
    d = tmp_path_factory.mktemp("generations")
    base = d / "g0.safetensors"
    out: dict[int, Path] = {}
    for k in range(1, 6):
        out[k] = d / f"g{k}" / "model.safetensors"
        out[k].parent.mkdir()
        rl_pair(base, out[k], SPECS, steps=k, lr=2e-6)
    return out


@pytest.fixture(scope="session")
def retrained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint of the same shapes whose every element differs from ``generations``."""
    path = tmp_path_factory.mktemp("retrained") / "model.safetensors"
    rl_pair(path.with_name("r0.safetensors"), path, SPECS, steps=1, lr=2e-6, seed=7)
    return path


def publish(new: Path, store: Path, generation: int, *extra: str) -> dict[str, Any]:
    proc = run_standbyc(
        "weights", "publish", str(new), "--to", str(store), "--generation", str(generation),
        "--format", "json", *extra,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    doc: dict[str, Any] = json.loads(proc.stdout)
    return doc


def run_standbyc(*args: str, timeout: float = 120, **kw: Any) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(STANDBYC), *args], capture_output=True, text=True, timeout=timeout, check=False, **kw
    )


# --- the compiled Job ----------------------------------------------------------------------


def compiled_into(out: Path, *specs: Path) -> Path:
    """``specs`` compiled (without validation) into ``out``; returns it."""
    result = compile_tree(list(specs), out, validate=False)
    assert result.ok, result.diagnostics
    return out


@pytest.fixture(scope="session")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """specs/ compiled (without validation) into a fresh out/."""
    return compiled_into(tmp_path_factory.mktemp("compiled") / "out", REPO / "specs")


EXAMPLE = "inference-system/inference-engine"  # specs/inference-engine.yaml's directory


def job_container(compiled: Path, tier: str, spec_dir: str = EXAMPLE) -> dict[str, Any]:
    name = spec_dir.rsplit("/", 1)[-1]
    path = compiled / spec_dir / f"job-{name}-weight-sync-{tier}.yaml"
    job = yaml.safe_load(path.read_text())
    container: dict[str, Any] = job["spec"]["template"]["spec"]["containers"][0]
    return container


def job_command(
    compiled: Path, tier: str, *, source: str, weights: Path, pushgateway: str | None = None,
    spec_dir: str = EXAMPLE, expect_pods: bool = False,
) -> list[str]:  # fmt: skip
    """The exact command of the compiled Job, with only the paths and URL hosts rewritten:
    the store URL's host, the weights mount, the Pushgateway's host; and, unless
    ``expect_pods``, ``--expect-pods 0``: the tier's engine Service resolves to nothing
    here, and only the reload tests (tests/sync/reload/) start engine pods for it."""
    container = job_container(compiled, tier, spec_dir)
    cmd = _rewritten(container, source=source, weights=weights, pushgateway=pushgateway)
    if not expect_pods and "--expect-pods" in cmd:
        cmd = with_arg(cmd, "--expect-pods", "0")
    return cmd


def report_command(compiled: Path, *, weights: Path, pushgateway: str) -> list[str]:
    """The exact command of the compiled weight-report CronJob, rewritten as above."""
    path = compiled / "inference-system/inference-engine"
    cronjob = yaml.safe_load((path / "cronjob-inference-engine-weight-report.yaml").read_text())
    container = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]["containers"][0]
    return _rewritten(container, source="", weights=weights, pushgateway=pushgateway)


def _rewritten(
    container: dict[str, Any], *, source: str, weights: Path, pushgateway: str | None
) -> list[str]:
    argv = [*container["command"], *container["args"]]
    assert argv[0] == "standbyc"
    out: list[str] = [str(STANDBYC)]
    args = iter(argv[1:])
    for arg in args:
        out.append(arg)
        if arg == "--source":
            out.append(source)
            next(args)
        elif arg == "--target":
            value = next(args)
            assert value.startswith("/weights/"), value
            out.append(str(weights / value.removeprefix("/weights/")))
        elif arg == "--tier":  # weights report: --tier NAME DIR
            out.append(next(args))
            value = next(args)
            assert value.startswith("/weights/"), value
            out.append(str(weights / value.removeprefix("/weights/")))
        elif arg == "--pushgateway":
            next(args)
            # Default: a port nothing listens on (the cluster's address does not resolve here).
            out.append(pushgateway or f"http://127.0.0.1:{free_port()}")
    return out


@pytest.fixture
def tmpfs(tmp_path: Path) -> Iterator[Any]:
    """Mount small tmpfs file systems: ``tmpfs(path, size)``; all unmounted after."""
    mounted: list[Path] = []

    def mount(path: Path, size: str) -> Path:
        path.mkdir(parents=True, exist_ok=True)
        proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                              capture_output=True, text=True, check=False)  # fmt: skip
        if proc.returncode != 0:  # make test runs as root, as CI does: a failure, not a skip
            pytest.fail(f"a tmpfs cannot be mounted here (run as root): {proc.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in reversed(mounted):
        subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


def kill_at(proc: subprocess.Popen[bytes], partial: Path, nbytes: int) -> int:
    """SIGKILL ``proc`` once ``partial`` holds ``nbytes`` (or after 10 s); its size then."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and (not partial.exists() or partial.stat().st_size < nbytes):
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return partial.stat().st_size


def with_arg(cmd: list[str], flag: str, value: str) -> list[str]:
    """``cmd`` with the value after ``flag`` replaced (to set up a scenario)."""
    out = [*cmd]
    out[out.index(flag) + 1] = value
    return out


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def tree_bytes(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def copy_checkpoint(src: Path, dest_dir: Path) -> Path:
    dest_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(src, dest_dir / "model.safetensors")
    return dest_dir / "model.safetensors"


TIER = "cold"
TARGET = f"{TIER}/llama-7b"


def run_sync(cmd: list[str], timeout: float = 120) -> tuple[int, dict[str, Any], str, float]:
    started = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
    took = time.monotonic() - started
    doc = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, doc, proc.stderr, took


def leftovers(weights: Path) -> dict[str, int]:
    """Every file under the tier's .standbyc/ but the lock, the state, the last run's
    numbers and the generation file: what a sync left."""
    state = weights / TIER / ".standbyc"
    return {
        p.relative_to(state).as_posix(): p.stat().st_size
        for p in state.rglob("*")
        if p.is_file() and p.name not in ("lock", "state.json", "last-sync.json", "generation")
    }


# --- a store and a standby to attack (tests/faultserver.py serves the store) ------------


@pytest.fixture
def store(tmp_path: Path, generations: dict[int, Path]) -> Path:
    """Generations 41 (an anchor) and 42 (a delta from it)."""
    root = tmp_path / "store"
    publish(generations[1], root, 41)
    publish(generations[2], root, 42)
    return root


@pytest.fixture
def served(store: Path) -> Iterator[FaultServer]:
    server = FaultServer(store).start()
    yield server
    server.stop()


@pytest.fixture
def standby(served: FaultServer, compiled: Path, tmp_path: Path) -> tuple[list[str], Path]:
    """The cold Job's command against the fault server, on a standby holding 41."""
    weights = tmp_path / "weights"
    cmd = job_command(compiled, TIER, source=served.url, weights=weights)
    code, _, err, _ = run_sync(with_arg(cmd, "--generation", "41"))
    assert code == 0, err
    served.log.clear()
    return cmd, weights


def with_flag(cmd: list[str], flag: str, value: str) -> list[str]:
    """``cmd`` with ``flag`` set to ``value``, added before ``--format`` if not there."""
    if flag in cmd:
        return with_arg(cmd, flag, value)
    at = cmd.index("--format")
    return [*cmd[:at], flag, value, *cmd[at:]]


def held(weights: Path) -> dict[str, bytes]:
    return tree_bytes(weights / TARGET)


def tree_state(root: Path) -> dict[str, object]:
    """Everything under ``root`` without following a link: each file's bytes, each link's
    target, each other entry's kind. Equal before and after: nothing changed."""
    out: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        rel = path.relative_to(root).as_posix()
        if path.is_symlink():
            out[rel] = ("link", str(path.readlink()))
        elif path.is_file():
            out[rel] = path.read_bytes()
        else:
            out[rel] = ("dir",) if path.is_dir() else ("other", path.lstat().st_mode)
    return out


# --- signed generations (tests/sync/signing.py) --------------------------------------------


@pytest.fixture(scope="session")
def keys(tmp_path_factory: pytest.TempPathFactory) -> Keys:
    """The publisher's and an attacker's EC keys, a small PKI and a rogue one."""
    return make_keys(tmp_path_factory.mktemp("keys"))


@pytest.fixture(scope="session")
def sharded(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Generations 1 and 2 of a small Llama directory, its weights in shards."""
    from tests.sync import hfmodel  # noqa: PLC0415 - torch, for the tests that use it

    return hfmodel.build(tmp_path_factory.mktemp("hf-sharded"), shard="60KB")


@pytest.fixture(scope="session")
def signed(
    sharded: dict[int, Path], keys: Keys, tmp_path_factory: pytest.TempPathFactory
) -> dict[int, Path]:
    """``sharded``'s generations signed by the publisher (`weights publish --sign-key`)."""
    d = tmp_path_factory.mktemp("signed")
    out = {}
    for g in (1, 2):
        out[g] = d / f"g{g}"
        shutil.copytree(sharded[g], out[g])
        doc = publish(out[g], d / "scratch", g, "--sign-key", str(keys.publisher),
                      "--model", MODEL)  # fmt: skip
        assert doc["signature"]["how"] == "signed", doc
    return out


@pytest.fixture
def engine() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.shutdown()
    server.server_close()
