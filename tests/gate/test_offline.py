"""The offline guarantee: no schema or module is fetched when validating."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from compiler.gate import schemas
from compiler.validation import run_gate

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]
UNROUTABLE = "http://10.255.255.1:3128"  # TEST-NET style black hole: connects never complete


def _no_network_env(schema_dir: Path) -> dict[str, str]:
    env = dict(os.environ)
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"):
        env[var] = UNROUTABLE
    env.pop("NO_PROXY", None)
    env.pop("no_proxy", None)
    env["GOPROXY"] = "off"
    env["STANDBYC_SCHEMA_DIR"] = str(schema_dir)
    env["PYTHONPATH"] = str(REPO)
    return env


def _isolate(argv: list[str]) -> list[str]:
    """Also drop into an empty network namespace when we may (root, util-linux unshare)."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "--net", "true"], check=False).returncode == 0:
        return [unshare, "--net", *argv]
    return argv


def test_validate_passes_with_network_unreachable(validators: Path) -> None:
    env = _no_network_env(validators)
    probe = _isolate(
        [
            sys.executable,
            "-c",
            "import urllib.request as u; u.urlopen('https://pypi.org', timeout=5)",
        ]
    )
    reached = subprocess.run(probe, env=env, capture_output=True, text=True, check=False)
    assert reached.returncode != 0, "the test environment still reaches the network"

    argv = _isolate([sys.executable, "-m", "compiler", "validate", str(FIXTURES / "good")])
    proc = subprocess.run(
        argv, env=env, cwd=REPO, capture_output=True, text=True, timeout=300, check=False
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "PASSED: 0 errors" in proc.stdout


def test_missing_schemas_name_the_build_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no schema dir and no module cache, validation stops with the command to run."""
    monkeypatch.setenv("GOMODCACHE", str(tmp_path / "empty-modcache"))
    monkeypatch.setenv("GOPROXY", "off")
    with pytest.raises(schemas.SchemasMissing) as err:
        run_gate(FIXTURES / "good", schema_dir=tmp_path / "schemas", kube_versions=["1.31"])
    assert "run: make schemas" in str(err.value)  # in a checkout; a wheel says its own
    assert "module lookup disabled by GOPROXY=off" in str(err.value)
