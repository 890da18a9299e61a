"""The weight store's NetworkPolicy: only this spec's weight-sync pods reach the store's
port; in Istio ambient also on the HBONE port, and the kubelet's probe from the link-local
address ztunnel SNATs it to, whether or not ``istio.enabled`` emits a DestinationRule."""

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
"""
SYNC_PODS = {"podSelector": {"matchLabels": {"standbyc.dev/weight-sync": "engine"}}}


def _policy(tmp_path: Path, istio: str) -> tuple[list[dict[str, Any]], set[str]]:
    spec = tmp_path / "engine.yaml"
    spec.write_text(SPEC % istio)
    result = compile_tree([spec], tmp_path / "out", validate=False, write=False)
    assert result.ok, result.diagnostics
    policy = yaml.safe_load(result.files["serving/engine/networkpolicy-engine-weight-store.yaml"])
    kinds = {yaml.safe_load(text)["kind"] for name, text in result.files.items()
             if name.endswith(".yaml") and "/tests/" not in name}  # fmt: skip
    return policy["spec"]["ingress"], kinds


def test_sidecar_or_no_mesh_admits_the_sync_pods_on_the_store_port_only(tmp_path: Path) -> None:
    for istio in ("{}", "{enabled: true, mode: sidecar}"):
        ingress, _ = _policy(tmp_path, istio)
        assert ingress == [{"from": [SYNC_PODS], "ports": [{"protocol": "TCP", "port": 8080}]}]


@pytest.mark.parametrize("enabled", [True, False])
def test_ambient_admits_hbone_and_the_kubelet_probe(tmp_path: Path, enabled: bool) -> None:
    ingress, kinds = _policy(tmp_path, f"{{enabled: {str(enabled).lower()}, mode: ambient}}")
    assert ingress == [
        {
            "from": [SYNC_PODS],
            "ports": [{"protocol": "TCP", "port": 8080}, {"protocol": "TCP", "port": 15008}],
        },
        {
            "from": [{"ipBlock": {"cidr": "169.254.7.127/32"}}],
            "ports": [{"protocol": "TCP", "port": 8080}],
        },
    ]
    assert ("DestinationRule" in kinds) == enabled
