"""Finished weight-sync Jobs expire: each compiled Job carries ``ttlSecondsAfterFinished``
(``weightSync.ttlAfterFinished``, 7 days by default), and Kubernetes' own TTL controller
(with the garbage collector, which ends the foreground deletion it asks for), run for real
beside the test API server, deletes the Jobs that finished longer ago than that and keeps
the others. Without it every generation left a Job per tier behind for
ever (Argo CD never prunes a hook), an old one a late retry could still run."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from compiler import tools
from compiler.api import compile_tree
from compiler.gate import pins as pinfile
from compiler.gate.apiserver import Session, crds_for
from compiler.gate.controlplane import ApiServer, ControlPlane
from tests import cluster
from tests.conftest import REPO

NS = "expiry"
WEEK_S = 7 * 24 * 3600
CONTROLLER = "kube-controller-manager"


@pytest.fixture
def session(control_plane: ControlPlane) -> Session:
    server = control_plane.servers[max(control_plane.servers)]
    session = Session(server)
    session.install_crds(crds_for({"CiliumEgressQoS", "ClusterPolicy", "PrometheusRule"},
                                  pinfile.load()))  # fmt: skip
    return session


def _jobs(tmp: Path, ttl: str | None) -> list[dict[str, Any]]:
    text = (REPO / "specs" / "inference-engine.yaml").read_text()
    text = text.replace("namespace: inference-system", f"namespace: {NS}")
    if ttl is not None:
        ttl_line = f"    ttlAfterFinished: {ttl}\n"
        text = text.replace("    image: registry", ttl_line + "    image: registry")
    spec = tmp / "specs" / "engine.yaml"
    spec.parent.mkdir(parents=True)
    spec.write_text(text)
    result = compile_tree([spec.parent], tmp / "out", validate=False)
    assert result.ok, result.diagnostics
    return [i.obj for i in cluster.objects(tmp / "out") if i.kind == "Job"]


def test_the_default_is_a_week_and_null_keeps_them(tmp_path: Path) -> None:
    jobs = _jobs(tmp_path / "default", None)
    assert jobs and {j["spec"]["ttlSecondsAfterFinished"] for j in jobs} == {WEEK_S}
    kept = _jobs(tmp_path / "kept", "null")
    assert kept and all("ttlSecondsAfterFinished" not in j["spec"] for j in kept)


def _finish(server: ApiServer, name: str, outcome: str, ago: timedelta) -> None:
    """Write the status the Job controller writes when a Job ends (``outcome`` ``Complete``
    or ``Failed``, ``ago`` before now): the TTL counts from that condition's time."""
    at = datetime.now(UTC) - ago
    stamp = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    started = (at - timedelta(minutes=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    first = "SuccessCriteriaMet" if outcome == "Complete" else "FailureTarget"
    conditions = [{"type": t, "status": "True", "lastProbeTime": stamp,
                   "lastTransitionTime": stamp, "reason": "Test", "message": "test"}
                  for t in (first, outcome)]  # fmt: skip
    status: dict[str, Any] = {"startTime": started, "conditions": conditions, "active": 0,
                              "ready": 0, "terminating": 0}  # fmt: skip
    if outcome == "Complete":
        status |= {"completionTime": stamp, "succeeded": 1}
    else:
        status |= {"failed": 4}
    path = f"/apis/batch/v1/namespaces/{NS}/jobs/{name}/status"
    reply = server.request("PATCH", path, {"status": status}, "application/merge-patch+json")
    assert reply.status == 200, reply.body


def _kubeconfig(server: ApiServer, path: Path) -> Path:
    path.write_text(
        "apiVersion: v1\nkind: Config\n"
        f"clusters: [{{name: test, cluster: {{server: 'https://127.0.0.1:{server.port}', "
        f"certificate-authority: '{server.cert_dir / 'apiserver.crt'}'}}}}]\n"
        f"users: [{{name: test, user: {{token: '{server.token}'}}}}]\n"
        "contexts: [{name: test, context: {cluster: test, user: test}}]\n"
        "current-context: test\n"
    )
    return path


def _names(server: ApiServer) -> set[str]:
    jobs = cluster.get(server, f"/apis/batch/v1/namespaces/{NS}/jobs")["items"]
    return {j["metadata"]["name"] for j in jobs}


def test_kubernetes_deletes_the_jobs_that_finished_a_week_ago(
    session: Session, tmp_path: Path
) -> None:
    if tools.find(CONTROLLER) is None:
        pytest.fail(f"{CONTROLLER} not installed: run `make tools`", pytrace=False)
    server = session.server
    session.create_namespaces([NS])
    jobs = {j["metadata"]["labels"]["standbyc.dev/tier"]: j for j in _jobs(tmp_path, None)}
    for job in jobs.values():
        reply = cluster.apply(session, job)
        assert reply.status in (200, 201), reply.body
    name = {tier: job["metadata"]["name"] for tier, job in jobs.items()}
    _finish(server, name["hot"], "Complete", timedelta(days=7, hours=1))
    _finish(server, name["warm"], "Failed", timedelta(days=7, hours=1))
    _finish(server, name["cold"], "Failed", timedelta(days=6))
    controller = tools.start(CONTROLLER, [
        "--kubeconfig", str(_kubeconfig(server, tmp_path / "kubeconfig")),
        "--controllers", "ttl-after-finished,garbage-collector-controller", "--leader-elect=false",
        "--secure-port", "0", "--use-service-account-credentials=false",
    ], log=tmp_path / "controller.log")  # fmt: skip
    try:
        deadline = time.monotonic() + 90
        while _names(server) != {name["cold"]}:
            assert controller.poll() is None, (tmp_path / "controller.log").read_text()[-3000:]
            assert time.monotonic() < deadline, (_names(server), name)
            time.sleep(0.5)
        time.sleep(3)  # the one that finished six days ago stays
        assert _names(server) == {name["cold"]}
    finally:
        controller.kill()
        controller.wait()
