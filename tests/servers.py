"""Real servers on 127.0.0.1 for the tests and the bench: nginx (from Debian) serving a
directory, and the Prometheus Pushgateway and server (built by `make tools`)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler import tools


class ServerMissing(RuntimeError):
    """A server the tests need is not installed (`make test` installs it)."""


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
            raise ServerMissing(
                "nginx is missing (make test installs it: apt-get install nginx-light)"
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

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=10)


def start_pushgateway(cwd: Path, port: int | None = None) -> Pushgateway:
    """A Pushgateway as the prometheus-community chart runs it by default: no persistence,
    so a restart (the same ``port`` again) forgets every push."""
    binary = tools.find("pushgateway")
    if binary is None:
        raise ServerMissing("the Pushgateway is not installed (make tools builds it)")
    port = port or free_port()
    proc = subprocess.Popen(
        [str(binary), f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"], cwd=cwd
    )
    _wait_port(port, proc, "pushgateway")
    return Pushgateway(port, proc)


@dataclass
class Prometheus:
    port: int
    proc: subprocess.Popen[bytes]

    def api(self, path: str, **params: str) -> Any:
        query = urllib.parse.urlencode(params)
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}" + (f"?{query}" if query else "")
        with urllib.request.urlopen(url, timeout=10) as resp:
            doc = json.loads(resp.read())
        assert doc["status"] == "success", doc
        return doc["data"]

    def alerts(self) -> list[dict[str, Any]]:
        alerts: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return alerts

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(timeout=30)


def start_prometheus(directory: Path, config: dict[str, Any]) -> Prometheus:
    """The Prometheus server (built from the same module version as promtool) with
    ``config`` (prometheus.yml as a dict; rule_files relative to ``directory``)."""
    binary = tools.find("prometheus")
    if binary is None:
        raise ServerMissing("the Prometheus server is not installed (make tools builds it)")
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "prometheus.yml").write_text(json.dumps(config))
    port = free_port()
    proc = subprocess.Popen(
        [
            str(binary),
            f"--config.file={directory / 'prometheus.yml'}",
            f"--storage.tsdb.path={directory / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--log.level=warn",
        ],
        cwd=directory,
    )
    _wait_port(port, proc, "prometheus")
    server = Prometheus(port, proc)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:  # ready: the rules are loaded
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=5) as resp:
                if resp.status == 200:
                    return server
        except OSError:
            pass
        time.sleep(0.1)
    server.stop()
    raise RuntimeError("prometheus did not become ready")


def start_backfilled(directory: Path, openmetrics: str) -> Prometheus:
    """A Prometheus whose TSDB holds ``openmetrics`` (OpenMetrics text with timestamps),
    backfilled with ``promtool tsdb create-blocks-from openmetrics`` as its data."""
    directory.mkdir(parents=True, exist_ok=True)
    source = directory / "series.om.txt"
    source.write_text(openmetrics)
    tools.run("promtool", ["tsdb", "create-blocks-from", "openmetrics", str(source),
                           str(directory / "data")])  # fmt: skip
    return start_prometheus(directory, {"global": {"scrape_interval": "30s"}})
