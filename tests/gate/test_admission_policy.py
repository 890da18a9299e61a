"""Kubernetes' own admission policies (``qos.outputs: admissionPolicy``), proven by the real
thing: the pinned kube-apiserver, at each minor that serves MutatingAdmissionPolicy at v1,
receives the compiled policies and bindings, then Pods of each tier, of no tier, of another
namespace, of the tier without the engine's labels, with the annotations already set by
hand and with a tier label naming no tier; every stored Pod is read back. The same Pods go
through the Kyverno CLI with the compiled ClusterPolicy (``kyverno apply``): the two engines
must give identical Pods, case by case. Updates the validating policy must refuse, and
those it must let through, are made for real."""

from __future__ import annotations

import itertools
import time
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from compiler import tools
from compiler.api import compile_tree
from compiler.gate import kyverno, pins
from compiler.gate.apiserver import Session, judge
from compiler.gate.controlplane import ApiServer, ControlPlane
from compiler.validation import run_gate
from tests import cluster
from tests.gate.conftest import need

EGRESS, PRIORITY = "kubernetes.io/egress-bandwidth", "bandwidth.cilium.io/priority"
NATIVE = ("1.36", "1.37")  # the minors that serve MutatingAdmissionPolicy at v1
TIER_KEY = "standby.example.com/tier"
ENGINE = {"app.kubernetes.io/name": "llm"}
WANTED = {"hot": {EGRESS: "40G", PRIORITY: "guaranteed"}, "warm": {EGRESS: "10G", PRIORITY: "100"}}
COUNTER = itertools.count()


def _spec(namespace: str) -> str:
    return f"""apiVersion: standbyc.dev/v1alpha1
kind: StandbySpec
metadata: {{name: qos, namespace: {namespace}}}
spec:
  engine: {{selector: {{app.kubernetes.io/name: llm}}, tierLabel: {TIER_KEY}}}
  tiers:
    hot: {{replicas: 2, egress: 40Gbit/s}}
    warm: {{replicas: 1, egress: 10Gbit/s, priority: 100}}
  qos: {{outputs: [ciliumEgressQoS, kyverno, admissionPolicy]}}
  validation: {{kubernetesVersions: ["1.36", "1.37"]}}
"""


def pod(name: str, namespace: str, labels: dict[str, str], **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    container = {"name": "engine", "image": "registry.example.com/engine:1"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [container]},
    }


def cases(ns: str, other: str) -> list[dict[str, Any]]:
    """Every Pod both engines are given, as it is created."""
    return [
        pod("hot-0", ns, {**ENGINE, TIER_KEY: "hot"}),
        pod("warm-0", ns, {**ENGINE, TIER_KEY: "warm"}),
        pod("primary-0", ns, dict(ENGINE)),  # no tier: the serving pods
        pod("hot-elsewhere", other, {**ENGINE, TIER_KEY: "hot"}),  # a namespace not the spec's
        pod("not-the-engine", ns, {"app.kubernetes.io/name": "other", TIER_KEY: "hot"}),
        pod(
            "by-hand",
            ns,
            {**ENGINE, TIER_KEY: "warm"},
            **{EGRESS: "1G", PRIORITY: "besteffort", "team": "ml"},
        ),
        pod("no-such-tier", ns, {**ENGINE, TIER_KEY: "lukewarm"}),
        pod("cold-not-in-spec", ns, {**ENGINE, TIER_KEY: "cold"}),  # the spec has no cold tier
    ]


# What each case must hold once created, in both engines.
EXPECTED = {
    "hot-0": WANTED["hot"],
    "warm-0": WANTED["warm"],
    "primary-0": {},
    "hot-elsewhere": {},
    "not-the-engine": {},
    "by-hand": {**WANTED["warm"], "team": "ml"},
    "no-such-tier": {},
    "cold-not-in-spec": {},
}


@pytest.fixture
def compiled(tmp_path: Path) -> tuple[Path, str, str]:
    n = next(COUNTER)
    ns, other = f"qos-{n}-{id(tmp_path) % 10_000}", f"elsewhere-{n}-{id(tmp_path) % 10_000}"
    spec = tmp_path / "qos.yaml"
    spec.write_text(_spec(ns))
    out = tmp_path / "out"
    result = compile_tree([spec], out, validate=False)
    assert result.ok, result.diagnostics
    return out / ns / "qos", ns, other


def _create(server: ApiServer, obj: dict[str, Any]) -> Any:
    ns = obj["metadata"].get("namespace")
    path = f"/api/v1/namespaces/{ns}/{obj['kind'].lower()}s" if ns else "/api/v1/namespaces"
    return server.request("POST", path, obj)


def _namespaces(server: ApiServer, *names: str) -> None:
    for name in names:
        reply = _create(
            server, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
        )
        assert reply.status in (201, 409), reply.body
        # No controller runs: the service account admission wants the default account.
        account = {"apiVersion": "v1", "kind": "ServiceAccount",
                   "metadata": {"name": "default", "namespace": name}}  # fmt: skip
        reply = server.request("POST", f"/api/v1/namespaces/{name}/serviceaccounts", account)
        assert reply.status in (201, 409), reply.body


def _patch(server: ApiServer, ns: str, name: str, patch: dict[str, Any]) -> Any:
    return server.request(
        "PATCH", f"/api/v1/namespaces/{ns}/pods/{urllib.parse.quote(name)}", patch,
        "application/merge-patch+json",
    )  # fmt: skip


def _stored(server: ApiServer, ns: str, name: str) -> dict[str, Any]:
    body: dict[str, Any] = cluster.get(server, f"/api/v1/namespaces/{ns}/pods/{name}")
    return body


def _in_force(server: ApiServer, ns: str) -> None:
    """Until both policies act: a probe Pod of the hot tier is annotated on creation, and a
    hand edit of it is refused. The API server learns of new policies asynchronously."""
    deadline = time.monotonic() + 60
    for attempt in itertools.count():
        probe = pod(f"probe-{attempt}", ns, {**ENGINE, TIER_KEY: "hot"})
        created = _create(server, probe)
        assert created.status == 201, created.body
        annotated = (created.body["metadata"].get("annotations") or {}) == WANTED["hot"]
        edit = {"metadata": {"annotations": {EGRESS: "1G"}}}
        refused = annotated and _patch(server, ns, probe["metadata"]["name"], edit).status == 422
        server.request("DELETE", f"/api/v1/namespaces/{ns}/pods/probe-{attempt}")
        if refused:
            return
        assert time.monotonic() < deadline, "the admission policies never came into force"
        time.sleep(0.5)


def _kyverno(policy: Path, obj: dict[str, Any], work: Path) -> dict[str, str]:
    """The Pod as Kyverno's engine leaves it (``kyverno apply``): its annotations."""
    name = obj["metadata"]["name"]
    source = work / f"{name}.yaml"
    source.write_text(yaml.safe_dump(obj))
    out = work / f"out-{name}"
    out.mkdir()
    tools.run(kyverno.TOOL, ["apply", str(policy), "--resource", str(source), "-o", str(out),
                             "--remove-color"])  # fmt: skip
    mutated = sorted(out.glob("*.yaml"))
    result = next(yaml.safe_load_all(mutated[0].read_text())) if mutated else obj
    annotations: dict[str, str] = result["metadata"].get("annotations") or {}
    return annotations


@pytest.fixture
def servers(control_plane: ControlPlane) -> Iterator[dict[str, ApiServer]]:
    yield cluster.only(control_plane, NATIVE).servers


def test_the_api_server_and_kyverno_give_the_same_pods(
    compiled: tuple[Path, str, str], servers: dict[str, ApiServer], tmp_path: Path
) -> None:
    need(kyverno.TOOL)
    tree, ns, other = compiled
    policies = [o.obj for o in cluster.objects(tree) if "AdmissionPolicy" in o.kind]
    assert sorted(o["kind"] for o in policies) == [
        "MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
    ]  # fmt: skip
    (clusterpolicy,) = tree.glob("clusterpolicy-*.yaml")
    kyverno_pods = {
        c["metadata"]["name"]: _kyverno(clusterpolicy, c, tmp_path) for c in cases(ns, other)
    }
    assert kyverno_pods == EXPECTED  # Kyverno does what is wanted
    for version, server in servers.items():
        _namespaces(server, ns, other)
        # A Pod created before the policies existed.
        before = _create(server, pod("before", ns, {**ENGINE, TIER_KEY: "hot"}))
        assert before.status == 201, before.body
        session = Session(server)
        for obj in policies:
            reply = cluster.apply(session, obj)
            assert reply.status in (200, 201), (version, obj["kind"], reply.body)
        _in_force(server, ns)
        native = {}
        for case in cases(ns, other):
            created = _create(server, case)
            assert created.status == 201, (version, case["metadata"]["name"], created.body)
            stored = _stored(server, case["metadata"]["namespace"], case["metadata"]["name"])
            native[case["metadata"]["name"]] = stored["metadata"].get("annotations") or {}
        assert native == kyverno_pods, version  # case by case, the same Pods

        # The Pod from before the policies: untouched, and updated otherwise at will.
        assert not _stored(server, ns, "before")["metadata"].get("annotations")
        assert _patch(server, ns, "before", {"metadata": {"labels": {"x": "y"}}}).status == 200
        _updates(server, ns, version)


def _updates(server: ApiServer, ns: str, version: str) -> None:
    refused = {
        "a hand edit of the egress": {"metadata": {"annotations": {EGRESS: "100G"}}},
        "the tier relabelled alone": {"metadata": {"labels": {TIER_KEY: "warm"}}},
        "the annotations taken away": {"metadata": {"annotations": {EGRESS: None}}},
    }
    for what, patch in refused.items():
        reply = _patch(server, ns, "hot-0", patch)
        assert reply.status == 422, (version, what, reply.body)
        assert f"ValidatingAdmissionPolicy 'standbyc-{ns}.qos-egress'" in reply.body["message"]
        assert "carries kubernetes.io/egress-bandwidth=" in reply.body["message"]
        assert _stored(server, ns, "hot-0")["metadata"]["annotations"] == WANTED["hot"]
    allowed = {
        "another label": {"metadata": {"labels": {"rollout": "2"}}},
        "the tier relabelled with its annotations": {
            "metadata": {"labels": {TIER_KEY: "warm"}, "annotations": WANTED["warm"]}
        },
        "relabelled out of the tiers": {"metadata": {"labels": {TIER_KEY: "retired"}}},
    }
    for what, patch in allowed.items():
        reply = _patch(server, ns, "hot-0", patch)
        assert reply.status == 200, (version, what, reply.body)
    # The hand-set Pod's annotations were corrected at creation, and stay corrected.
    assert _patch(server, ns, "by-hand", {"metadata": {"annotations": {PRIORITY: "guaranteed"}}}
                  ).status == 422  # fmt: skip


def test_kubeconform_and_the_api_server_take_the_new_kinds(
    compiled: tuple[Path, str, str], validators: Path, control_plane: ControlPlane
) -> None:
    """The gate validates the four kinds at 1.36 and 1.37: kubeconform's strict schemas,
    and the API server's dry run."""
    tree, _, _ = compiled
    report = run_gate(tree.parent.parent, kube_versions=list(NATIVE), schema_dir=validators)
    assert report.ok, report.summary_text()
    items = [i for i in cluster.objects(tree.parent.parent) if "AdmissionPolicy" in i.kind]
    assert len(items) == 4
    found = judge(cluster.only(control_plane, NATIVE), items, pins.load())
    assert [f for f in found if f.severity == "error"] == []
