"""The weight store's NetworkPolicy: only this spec's weight-sync pods reach the store's
port; in Istio ambient also on the HBONE port, and the kubelet's probe from the link-local
address ztunnel SNATs it to, whether or not ``istio.enabled`` emits a DestinationRule."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from compiler import tools
from compiler.api import compile_tree
from tests.conftest import REPO

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


# --- the rule for engine pods a user's own NetworkPolicy selects -----------------------------

ENGINE_PODS = {"app": "inference-engine", "tier": "hot"}
USERS_POLICY = {
    "apiVersion": "networking.k8s.io/v1",
    "kind": "NetworkPolicy",
    "metadata": {"name": "engines-serve-the-ingress", "namespace": "inference-system"},
    "spec": {
        "podSelector": {"matchLabels": {"app": "inference-engine"}},
        "policyTypes": ["Ingress"],
        "ingress": [
            {
                "from": [{"namespaceSelector": {"matchLabels": {"name": "ingress-nginx"}}}],
                "ports": [{"protocol": "TCP", "port": 8000}],
            }
        ],
    },
}


def _pod(namespace: str, labels: dict[str, str], ip: str) -> dict[str, Any]:
    return {
        "Internal": {
            "PodLabels": labels,
            "NamespaceLabels": {"name": namespace},
            "Namespace": namespace,
        },
        "IP": ip,
    }


def _allowed(tmp_path: Path, policy: dict[str, Any], traffic: list[tuple[Any, ...]]) -> list[bool]:
    """cyclonus' policy engine (analyze --mode query-traffic): whether each flow
    (source namespace, source labels, destination labels, port) is allowed."""
    policies = tmp_path / "policies"
    policies.mkdir(parents=True, exist_ok=True)
    (policies / "policy.yaml").write_text(yaml.safe_dump(policy))
    flows = [
        {
            "Source": _pod(ns, labels, f"10.0.1.{i + 10}"),
            "Destination": _pod("inference-system", dest, "10.0.2.10"),
            "Protocol": "TCP",
            "ResolvedPort": port,
            "ResolvedPortName": "",
        }
        for i, (ns, labels, dest, port) in enumerate(traffic)
    ]
    path = tmp_path / "traffic.json"
    path.write_text(json.dumps(flows))
    args = ["analyze", "--mode", "query-traffic", "--policy-path", str(policies),
            "--traffic-path", str(path)]  # fmt: skip
    result = tools.run("cyclonus", args)
    verdicts = re.findall(r"IS ALLOWED\? \|\s+(TRUE|FALSE)", result.stdout)
    assert len(verdicts) == len(traffic), result.stdout
    return [v == "TRUE" for v in verdicts]


def test_the_printed_rule_admits_the_weight_sync_job_and_nothing_else(tmp_path: Path) -> None:
    result = compile_tree([REPO / "specs/inference-engine.yaml"], tmp_path / "out",
                          validate=False, write=False)  # fmt: skip
    assert result.ok, result.diagnostics
    job = yaml.safe_load(
        result.files["inference-system/inference-engine/job-inference-engine-weight-sync-hot.yaml"]
    )
    job_pods = job["spec"]["template"]["metadata"]["labels"]
    printed = [r for r in result.specs[0].plan.requirements() if "NetworkPolicy of yours" in r]
    assert len(printed) == 1
    rule = json.loads(printed[0].split("weight-sync Jobs: ", 1)[1])
    plan_md = result.files["inference-system/inference-engine/PLAN.md"]
    assert json.dumps(rule, sort_keys=True) in plan_md  # the same rule, in PLAN.md
    # No object standbyc emits selects the engine pods with a NetworkPolicy.
    for name, text in result.files.items():
        if name.endswith(".yaml") and "/tests/" not in name:
            obj = yaml.safe_load(text)
            if obj.get("kind") == "NetworkPolicy":
                selected = obj["spec"]["podSelector"]["matchLabels"]
                assert not set(selected.items()) <= set(ENGINE_PODS.items())

    other_app = {"app": "batch-report"}
    other_sync = {**job_pods, "standbyc.dev/weight-sync": "another-spec"}
    flows = [
        ("inference-system", job_pods, ENGINE_PODS, 8000),  # the Job, on the reload port
        ("inference-system", job_pods, {**ENGINE_PODS, "tier": "warm"}, 8000),
        ("inference-system", other_app, ENGINE_PODS, 8000),  # another pod of the namespace
        ("inference-system", other_sync, ENGINE_PODS, 8000),  # another spec's Job
        ("other-team", job_pods, ENGINE_PODS, 8000),  # the same labels, another namespace
        ("inference-system", job_pods, ENGINE_PODS, 9090),  # the Job, another port
        ("ingress-nginx", {"app": "controller"}, ENGINE_PODS, 8000),  # serving traffic
    ]
    without = _allowed(tmp_path / "without", USERS_POLICY, flows)
    assert without == [False, False, False, False, False, False, True]
    patched = json.loads(json.dumps(USERS_POLICY))
    patched["spec"]["ingress"].append(rule)
    assert _allowed(tmp_path / "with", patched, flows) == [
        True, True, False, False, False, False, True
    ]  # fmt: skip
