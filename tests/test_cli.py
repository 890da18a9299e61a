"""Exit codes and output formats shared by every command."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from compiler import pipeline
from tests.conftest import run_cli


def test_no_command_is_a_usage_error() -> None:
    result = run_cli()
    assert result.code == 2
    assert "the following arguments are required: COMMAND" in result.err


def test_help_exits_zero() -> None:
    assert run_cli("--help").code == 0


def test_internal_error_exits_three_with_traceback(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*_: object) -> None:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(pipeline, "order", boom)
    result = run_cli("compile", "--no-validate")
    assert result.code == 3
    assert "Traceback" in result.err
    assert "RuntimeError: simulated bug" in result.err
    assert not (workdir / "out").exists()


def test_user_error_has_no_traceback_unless_debug(workdir: Path) -> None:
    plain = run_cli("compile", "missing.yaml")
    assert plain.code == 2
    assert "Traceback" not in plain.err
    debug = run_cli("--debug", "compile", "missing.yaml")
    assert debug.code == 2
    assert "Traceback" in debug.err


def test_compile_json_summary(workdir: Path) -> None:
    result = run_cli("compile", "--no-validate", "--format", "json")
    assert result.code == 0, result.err
    summary = json.loads(result.out)
    seed = next(
        s for s in summary["specs"] if s["directory"] == "inference-system/inference-engine"
    )
    assert seed["source"] == "specs/inference-engine.yaml"
    assert seed["objects"]["Job"] == 3
    # 14 GiB to 6 standbys over 100 Gbit/s: 721.55 Gbit, 7.2155 s at line rate.
    assert seed["derived"]["fullCopy"]["seconds"] == 7.216
    # 1 prober x 6 targets / 10 s = 0.6 probes/s, x 2 KiB = 1228.8 B/s.
    assert seed["derived"]["healthChecks"]["probesPerSecond"] == 0.6
    assert seed["derived"]["healthChecks"]["bytesPerSecond"] == 1228.8
    assert summary["files"]["removed"] == 0


def test_compile_text_summary(workdir: Path) -> None:
    result = run_cli("compile", "--no-validate")
    assert result.code == 0
    assert "inference-system/inference-engine  <- specs/inference-engine.yaml" in result.out
    assert "health checks: 1 prober x 6 targets / 10s = 0.6 probes/s" in result.out
