"""``standbyc doctor`` and ``standbyc schemas``."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from compiler.cli import main
from compiler.gate import DEFAULT_KUBE_VERSIONS, pins


def test_doctor_reports_pinned_tools_and_schemas(
    validators: Path, capsys: pytest.CaptureFixture[str], need: Callable[..., None]
) -> None:
    need("pint")
    assert main(["doctor", "--format", "json"]) == 0
    report = json.loads(capsys.readouterr().out)
    tools = {t["name"]: t for t in report["tools"]}
    p = pins.load()
    assert tools["kubeconform"]["version"] == p.tools["kubeconform"].version.removeprefix("v")
    assert tools["promtool"]["version"] in (p.tools["promtool"].release, "2.42.0")
    assert tools["pint"]["note"] == "ok"
    assert report["schemas"]["state"] == "ok"
    # The default matrix at least (other tests build older versions into the same cache).
    assert set(DEFAULT_KUBE_VERSIONS) <= set(report["schemas"]["kubernetes"])


def test_schemas_build_one_extra_version_offline(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """1.27 is outside the prebuilt window; it builds offline from kubernetes-validate."""
    code = main(
        ["schemas", "build", "--offline", "--kube-version", "1.27", "--schema-dir", str(tmp_path)]
    )
    assert code == 0
    assert (tmp_path / "kubernetes" / "v1.27.0" / "deployment-apps-v1.json").is_file()
    assert (tmp_path / "crds" / "prometheusrule-monitoring-v1.json").is_file()
    assert "kubernetes 1.27" in capsys.readouterr().out
