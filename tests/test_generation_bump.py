"""A new generation applied without Argo CD: ``kubectl apply --server-side`` of the tree
compiled for generation N+1 over the one for N, for real, on the test control plane.

A Job's ``spec.template`` cannot change, so a weight-sync Job of a fixed name would be
refused and the cluster left half updated (its rules wanting N+1, its Jobs at N, nothing
to run them). Named after its spec, the N+1 Job is a new object beside the N one; with the
schedule trigger the CronJob's template changes in place. Either way every object applies,
and the alert still sees a failed run: its job_name pattern, as the server stored the
PrometheusRule, matches every weight-sync Job there, old and new, with its tier."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from compiler.api import compile_tree
from compiler.gate import pins as pinfile
from compiler.gate.apiserver import Item, Session, crds_for
from compiler.gate.controlplane import ControlPlane
from tests import cluster
from tests.conftest import REPO

SEED = (REPO / "specs" / "inference-engine.yaml").read_text()
SCHEDULE = '    trigger: {type: schedule, schedule: "*/30 * * * *"}\n'


def _spec(namespace: str, generation: int, schedule: bool) -> str:
    text = SEED.replace("namespace: inference-system", f"namespace: {namespace}")
    text = text.replace("generation: 42", f"generation: {generation}")
    if schedule:
        text = text.replace("    image: registry", SCHEDULE + "    image: registry")
    return text


def _compiled(tmp: Path, namespace: str, generation: int, schedule: bool) -> list[Item]:
    spec = tmp / "specs" / "engine.yaml"
    spec.parent.mkdir(parents=True, exist_ok=True)
    spec.write_text(_spec(namespace, generation, schedule))
    result = compile_tree([spec.parent], tmp / "out", validate=False)
    assert result.ok, result.diagnostics
    return cluster.objects(tmp / "out")


def _apply_all(session: Session, objects: list[Item]) -> None:
    refused = {}
    for item in objects:
        reply = cluster.apply(session, item.obj)
        if reply.status not in (200, 201):
            refused[f"{item.kind}/{item.name}"] = reply.body.get("message")
    assert refused == {}


def _args(pod_spec: dict[str, Any]) -> list[str]:
    (container,) = pod_spec["containers"]
    return list(container["args"])


def _generation(args: list[str]) -> int:
    return int(args[args.index("--generation") + 1])


def _job_patterns(session: Session, namespace: str) -> list[re.Pattern[str]]:
    """WeightSyncJobFailed's job_name patterns (its matcher's, and the one that reads the
    tier), from the PrometheusRule the server holds."""
    rules = cluster.get(
        session.server, f"/apis/monitoring.coreos.com/v1/namespaces/{namespace}/prometheusrules"
    )
    (rule,) = rules["items"]
    (alert,) = [r for g in rule["spec"]["groups"] for r in g["rules"]
                if r.get("alert") == "WeightSyncJobFailed"]  # fmt: skip
    (matched,) = set(re.findall(r'kube_job_failed\{[^}]*job_name=~"([^"]+)"', alert["expr"]))
    tiers = set(re.findall(r'"tier", "\$1", "job_name", "([^"]+)"', alert["expr"]))
    return [re.compile(p) for p in (matched, *sorted(tiers))]


@pytest.fixture
def session(control_plane: ControlPlane) -> Session:
    server = control_plane.servers[max(control_plane.servers)]
    session = Session(server)
    used = {"CiliumEgressQoS", "ClusterPolicy", "PrometheusRule"}
    session.install_crds(crds_for(used, pinfile.load()))
    return session


def test_a_new_generation_of_hook_jobs_applies_beside_the_old(
    session: Session, tmp_path: Path
) -> None:
    ns = "bump-hook"
    session.create_namespaces([ns])
    before = _compiled(tmp_path / "n", ns, 42, schedule=False)
    _apply_all(session, before)
    after = _compiled(tmp_path / "n1", ns, 43, schedule=False)
    _apply_all(session, after)

    jobs = cluster.get(session.server, f"/apis/batch/v1/namespaces/{ns}/jobs")["items"]
    by_generation: dict[int, dict[str, str]] = {}
    for job in jobs:
        tier = job["metadata"]["labels"]["standbyc.dev/tier"]
        generation = _generation(_args(job["spec"]["template"]["spec"]))
        by_generation.setdefault(generation, {})[tier] = job["metadata"]["name"]
    tiers = {"hot", "warm", "cold"}
    assert {g: set(t) for g, t in by_generation.items()} == {42: tiers, 43: tiers}
    # the objects that name the generation were updated in place
    account = cluster.get(
        session.server, f"/api/v1/namespaces/{ns}/serviceaccounts/inference-engine-weight-sync"
    )
    assert account["metadata"]["annotations"]["standbyc.dev/model-generation"] == "43"
    # WeightSyncJobFailed sees a failed run of either generation, with its tier
    patterns = _job_patterns(session, ns)
    assert len(patterns) == 2
    for generation, names in by_generation.items():
        for tier, name in names.items():
            for pattern in patterns:
                match = pattern.fullmatch(name)
                assert match is not None and match.group(1) == tier, (generation, name)

    # The reason: the N+1 Job under the N Job's name is refused, spec.template immutable.
    new_hot = next(i.obj for i in after if i.kind == "Job" and i.name == by_generation[43]["hot"])
    renamed = {**new_hot, "metadata": {**new_hot["metadata"], "name": by_generation[42]["hot"]}}
    reply = cluster.apply(session, renamed)
    assert reply.status == 422, reply.body
    assert "field is immutable" in reply.body["message"]


def test_a_new_generation_updates_the_cronjobs_in_place(session: Session, tmp_path: Path) -> None:
    ns = "bump-schedule"
    session.create_namespaces([ns])
    _apply_all(session, _compiled(tmp_path / "n", ns, 42, schedule=True))
    path = f"/apis/batch/v1/namespaces/{ns}/cronjobs"
    uids = {c["metadata"]["name"]: c["metadata"]["uid"] for c in
            cluster.get(session.server, path)["items"]}  # fmt: skip
    _apply_all(session, _compiled(tmp_path / "n1", ns, 43, schedule=True))

    cronjobs = cluster.get(session.server, path)["items"]
    assert {c["metadata"]["name"]: c["metadata"]["uid"] for c in cronjobs} == uids
    syncs = [c for c in cronjobs if "standbyc.dev/tier" in c["metadata"].get("labels", {})]
    assert len(syncs) == 3
    for cronjob in syncs:
        pod = cronjob["spec"]["jobTemplate"]["spec"]["template"]["spec"]
        assert _generation(_args(pod)) == 43
    assert cluster.get(session.server, f"/apis/batch/v1/namespaces/{ns}/jobs")["items"] == []
    # a run of any of them is a Job WeightSyncJobFailed sees, with its tier
    (pattern,) = _job_patterns(session, ns)
    for cronjob in syncs:
        run = f"{cronjob['metadata']['name']}-29400000"
        match = pattern.fullmatch(run)
        assert match is not None
        assert match.group(1) == cronjob["metadata"]["labels"]["standbyc.dev/tier"]
