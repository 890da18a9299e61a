"""The Argo CD path: the plugin's commands run exactly as Argo CD runs them (the command
from deploy/argocd/plugin.yaml, a copy of the repository as the working directory, the
environment Argo CD sets), and what generate prints is the objects of the committed out/."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import OUT, REPO

PLUGIN = yaml.safe_load((REPO / "deploy/argocd/plugin.yaml").read_text())
BIN = Path(sys.executable).parent  # where the console script standbyc is installed


def _run(command: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(cwd), **env}
    if tools := os.environ.get("STANDBYC_TOOLS_DIR"):
        environ["STANDBYC_TOOLS_DIR"] = tools
    if schemas := os.environ.get("STANDBYC_SCHEMA_DIR"):
        environ["STANDBYC_SCHEMA_DIR"] = schemas
    return subprocess.run(command, cwd=cwd, env=environ, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The repository as Argo CD's repo server has it."""
    repo = tmp_path / "repo"
    for part in ("specs", "deploy"):
        shutil.copytree(REPO / part, repo / part)
    (repo / "README.md").write_text("an inference GitOps repository\n")
    return repo


def _out_objects() -> list[dict[str, Any]]:
    """The committed out/'s applied objects, in the order its kustomizations list them,
    read independently of standbyc."""
    found: list[dict[str, Any]] = []

    def visit(directory: Path) -> None:
        for entry in yaml.safe_load((directory / "kustomization.yaml").read_text())["resources"]:
            path = directory / entry
            if path.is_dir():
                visit(path)
            else:
                found.append(yaml.safe_load(path.read_text()))

    visit(OUT)
    return found


def test_discover_finds_the_specs(checkout: Path) -> None:
    result = _run(PLUGIN["spec"]["discover"]["find"]["command"], checkout)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["specs/grpc-llm.yaml", "specs/inference-engine.yaml"]
    (checkout / "specs").rename(checkout / "elsewhere")
    shutil.rmtree(checkout / "elsewhere")
    assert _run(PLUGIN["spec"]["discover"]["find"]["command"], checkout).stdout == ""


def test_generate_prints_exactly_the_objects_of_out(checkout: Path) -> None:
    result = _run(
        PLUGIN["spec"]["generate"]["command"],
        checkout,
        ARGOCD_APP_NAME="standbyc",
        ARGOCD_APP_NAMESPACE="argocd",
        ARGOCD_APP_REVISION="0123abc",
        KUBE_VERSION="v1.31.4",
        ARGOCD_ENV_SPECS="specs",
    )
    assert result.returncode == 0, result.stderr
    printed = list(yaml.safe_load_all(result.stdout))
    expected = _out_objects()
    key = lambda o: (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])  # noqa: E731
    assert sorted(printed, key=key) == sorted(expected, key=key)
    kinds = [o["kind"] for o in printed]
    assert kinds[0] == "CustomResourceDefinition" and kinds[-1] == "Job"  # apply order
    assert "ConfigManagementPlugin" not in kinds and "Kustomization" not in kinds
    assert "standbyc: Argo CD app standbyc (namespace argocd)" in result.stderr
    assert "ok   kubernetes 1.31" in result.stderr  # the cluster's version, validated
    assert "kubernetes 1.29" not in result.stderr
    assert not (checkout / "out").exists()  # nothing written into the checkout


def test_a_broken_spec_fails_the_sync_with_its_location(checkout: Path) -> None:
    spec = checkout / "specs" / "inference-engine.yaml"
    spec.write_text(spec.read_text().replace("egress: 25Gbit/s", "egress: 25Gbps/s"))
    result = _run(PLUGIN["spec"]["generate"]["command"], checkout, ARGOCD_ENV_VALIDATE="false")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "standbyc: specs/inference-engine.yaml:" in result.stderr
    assert "spec.tiers.hot.egress: cannot parse bandwidth '25Gbps/s'" in result.stderr


def test_the_deploy_manifests_name_the_plugin() -> None:
    apps = list(yaml.safe_load_all((REPO / "deploy/argocd/application.yaml").read_text()))
    appset = yaml.safe_load((REPO / "deploy/argocd/applicationset.yaml").read_text())
    name = f"{PLUGIN['metadata']['name']}-{PLUGIN['spec']['version']}"
    assert apps[0]["spec"]["source"]["path"] == "out"
    assert apps[1]["spec"]["source"]["plugin"]["name"] == name
    assert appset["spec"]["template"]["spec"]["source"]["plugin"]["name"] == name
    params = {p["name"] for p in PLUGIN["spec"]["parameters"]["static"]}
    assert {e["name"] for e in apps[1]["spec"]["source"]["plugin"]["env"]} <= params
    patch = yaml.safe_load((REPO / "deploy/argocd/repo-server-patch.yaml").read_text())
    (container,) = patch["spec"]["template"]["spec"]["containers"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/home/argocd/cmp-server/config/plugin.yaml" in mounts
    assert container["securityContext"]["runAsUser"] == 999
