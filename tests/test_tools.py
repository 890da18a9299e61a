"""The one wrapper for external programs: missing, failing and hanging tools."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler import tools
from compiler.errors import ToolFailed, ToolMissing


@pytest.fixture
def tool_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STANDBYC_TOOLS_DIR", str(tmp_path))
    return tmp_path


def _script(directory: Path, name: str, body: str) -> None:
    path = directory / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)


def test_missing_tool_names_the_install_command(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    monkeypatch.setattr(tools, "search_dirs", list)
    with pytest.raises(
        ToolMissing,
        match=r"kubeconform is not installed; install it with: standbyc tools install .*"
        r"--no-validate",
    ):
        tools.require("kubeconform")


def test_failure_shows_command_exit_code_and_indented_output(tool_dir: Path) -> None:
    _script(tool_dir, "faketool", "echo out; echo err >&2; exit 4")
    with pytest.raises(ToolFailed) as caught:
        tools.run("faketool", ["a", "b"])
    text = str(caught.value)
    assert f"command: {tool_dir}/faketool a b" in text
    assert "exit code: 4" in text
    assert "stdout:\n    out" in text
    assert "stderr:\n    err" in text


def test_hanging_tool_is_a_clean_failure(tool_dir: Path) -> None:
    _script(tool_dir, "slowtool", "sleep 5")
    with pytest.raises(ToolFailed, match=r"slowtool did not finish within 0.2 s"):
        tools.run("slowtool", [], timeout=0.2)
