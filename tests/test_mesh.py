"""Weight-sync Jobs in an Istio mesh. With sidecar injection (the default mode), an
injected proxy that runs as an ordinary container outlives the sync and the Job never
completes; the pods ask Istio for a native sidecar, which Kubernetes stops when the sync
container exits. Ambient mode injects nothing into the pod, so they ask for nothing."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from compiler.api import compile_tree

SPEC = """\
apiVersion: standbyc.dev/v1alpha1
kind: StandbySpec
metadata: {name: engine, namespace: serving}
spec:
  connectionPool:
    istio: %s
  weightSync:
    trigger: %s
"""


def _sync_pods(tmp_path: Path, istio: str, trigger: str) -> list[dict[str, Any]]:
    spec = tmp_path / "engine.yaml"
    spec.write_text(SPEC % (istio, trigger))
    result = compile_tree([spec], tmp_path / "out", validate=False, write=False)
    assert result.ok, result.diagnostics
    pods: list[dict[str, Any]] = []
    for name, text in sorted(result.files.items()):
        if "weight-sync-" not in name or "/tests/" in name:
            continue
        obj = yaml.safe_load(text)
        job = obj["spec"]["jobTemplate"] if obj["kind"] == "CronJob" else obj
        pods.append(job["spec"]["template"])
    assert len(pods) == 3, sorted(result.files)  # one per tier
    return pods


@pytest.mark.parametrize(
    "trigger", ["{type: argocdHook}", "{type: schedule, schedule: '*/30 * * * *'}"]
)
@pytest.mark.parametrize("istio", ["{}", "{enabled: true, mode: sidecar}"])
def test_sync_pods_ask_for_a_native_sidecar(tmp_path: Path, istio: str, trigger: str) -> None:
    for pod in _sync_pods(tmp_path, istio, trigger):
        assert pod["metadata"]["annotations"] == {"sidecar.istio.io/nativeSidecar": "true"}


@pytest.mark.parametrize("enabled", ["true", "false"])
def test_ambient_sync_pods_ask_for_nothing(tmp_path: Path, enabled: str) -> None:
    for pod in _sync_pods(tmp_path, f"{{enabled: {enabled}, mode: ambient}}", "{type: argocdHook}"):
        assert "annotations" not in pod["metadata"]
