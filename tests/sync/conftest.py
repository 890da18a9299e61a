"""Real servers for the weight-sync tests: nginx (from Debian) serving a store directory,
and the Prometheus Pushgateway (built by `make tools`), both on 127.0.0.1.

A missing server is a failure, not a skip: `make test` installs both.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml  # PyYAML: read files as the cluster would (YAML 1.1)

from compiler import tools
from compiler.api import compile_tree
from compiler.weights.testing import rl_pair, transformer_specs
from tests.conftest import REPO

STANDBYC = Path(sys.executable).with_name("standbyc")  # the console script, as in the image


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with {proc.returncode}")
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on {port}")


NGINX_CONF = """
daemon off;
{user}
worker_processes 1;
pid {run}/nginx.pid;
error_log {run}/error.log;
events {{ worker_connections 64; }}
http {{
  log_format sync '{{"uri":"$request_uri","status":$status,"bytes":$body_bytes_sent,'
                  '"range":"$http_range"}}';
  access_log {run}/access.log sync;
  client_body_temp_path {run}/tmp; proxy_temp_path {run}/tmp; fastcgi_temp_path {run}/tmp;
  uwsgi_temp_path {run}/tmp; scgi_temp_path {run}/tmp;
  types {{ application/json json; }}
  default_type application/octet-stream;
  server {{
    listen 127.0.0.1:{port};
    root {root};
    location /broken/ {{ return 503; }}
  }}
}}
"""


@dataclass
class Nginx:
    """nginx serving ``root`` at ``url``; its access log says what each request fetched."""

    root: Path
    run: Path
    port: int
    proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/"

    def start(self) -> None:
        self.run.mkdir(parents=True, exist_ok=True)
        (self.run / "tmp").mkdir(exist_ok=True)
        conf = self.run / "nginx.conf"
        # As root, nginx's workers would run as nobody, who cannot read pytest's 0700 dirs.
        user = "user root;" if os.geteuid() == 0 else ""
        conf.write_text(NGINX_CONF.format(user=user, run=self.run, root=self.root, port=self.port))
        binary = tools.find("nginx") or Path("/usr/sbin/nginx")
        if not binary.is_file():
            pytest.fail(
                "nginx is not installed (make test installs it: apt-get install nginx-light)"
            )
        self.proc = subprocess.Popen([str(binary), "-c", str(conf), "-p", str(self.run)])
        _wait_port(self.port, self.proc, "nginx")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.send_signal(signal.SIGQUIT)
            self.proc.wait(timeout=10)
            self.proc = None

    def log(self) -> list[dict[str, Any]]:
        path = self.run / "access.log"
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line]

    def clear_log(self) -> None:
        (self.run / "access.log").write_text("")
        if self.proc is not None:
            self.proc.send_signal(signal.SIGUSR1)  # reopen the log
            time.sleep(0.1)


@pytest.fixture
def nginx(tmp_path: Path) -> Iterator[Nginx]:
    server = Nginx(tmp_path / "store", tmp_path / "nginx", free_port())
    server.root.mkdir()
    server.start()
    yield server
    server.stop()


@dataclass
class Pushgateway:
    port: int
    proc: subprocess.Popen[bytes]

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def metrics(self) -> str:
        with urllib.request.urlopen(f"{self.url}/metrics", timeout=10) as resp:
            return str(resp.read().decode())


@pytest.fixture
def pushgateway(tmp_path: Path) -> Iterator[Pushgateway]:
    binary = tools.find("pushgateway")
    if binary is None:
        pytest.fail("the Pushgateway is not installed (make tools builds it into .tools/bin)")
    port = free_port()
    proc = subprocess.Popen(
        [str(binary), f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        cwd=tmp_path,
    )
    _wait_port(port, proc, "pushgateway")
    yield Pushgateway(port, proc)
    proc.terminate()
    proc.wait(timeout=10)


# --- checkpoints ---------------------------------------------------------------------------

SPECS = transformer_specs(layers=2, hidden=384, vocab=6000)


@pytest.fixture(scope="session")
def generations(tmp_path_factory: pytest.TempPathFactory) -> dict[int, Path]:
    """Generations 1..5 of a bf16 model, each one RL step after the previous one (~10 MB)."""
    d = tmp_path_factory.mktemp("generations")
    base = d / "g0.safetensors"
    out: dict[int, Path] = {}
    for k in range(1, 6):
        out[k] = d / f"g{k}.safetensors"
        rl_pair(base, out[k], SPECS, steps=k, lr=2e-6)
    return out


@pytest.fixture(scope="session")
def retrained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A checkpoint of the same shapes whose every element differs from ``generations``."""
    path = tmp_path_factory.mktemp("retrained") / "r.safetensors"
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


@pytest.fixture(scope="session")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """specs/ compiled (without validation) into a fresh out/; returns it."""
    out = tmp_path_factory.mktemp("compiled") / "out"
    result = compile_tree([REPO / "specs"], out, validate=False)
    assert result.ok, result.diagnostics
    return out


def job_container(compiled: Path, tier: str) -> dict[str, Any]:

    path = (
        compiled
        / "inference-system/inference-engine"
        / f"job-inference-engine-weight-sync-{tier}.yaml"
    )
    job = yaml.safe_load(path.read_text())
    container: dict[str, Any] = job["spec"]["template"]["spec"]["containers"][0]
    return container


def job_command(
    compiled: Path, tier: str, *, source: str, weights: Path, pushgateway: str | None = None
) -> list[str]:
    """The exact command of the compiled Job, with only the paths and URL hosts rewritten:
    the store URL's host, the weights mount, the Pushgateway's host."""
    container = job_container(compiled, tier)
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
        elif arg == "--pushgateway":
            next(args)
            # Default: a port nothing listens on (the cluster's address does not resolve here).
            out.append(pushgateway or f"http://127.0.0.1:{free_port()}")
    return out


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
