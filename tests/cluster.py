"""The tests' control plane: a real etcd and kube-apiserver (one per matrix version, by
emulation), started once per test session (``control_plane`` in tests/conftest.py), and
what the tests do with it: read a compiled tree's objects, apply them for real."""

from __future__ import annotations

import copy
import urllib.parse
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from compiler import tools, yamlio
from compiler.gate import DEFAULT_KUBE_VERSIONS, discover
from compiler.gate.apiserver import Item, Session, items
from compiler.gate.controlplane import APISERVER, ETCD, ApiServer, ControlPlane, Response


def start() -> Iterator[ControlPlane]:
    missing = [n for n in (APISERVER, ETCD) if tools.find(n) is None]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not installed: run `make tools` (standbyc tools install "
            "--optional), or set STANDBYC_TOOLS_DIR",
            pytrace=False,
        )
    with ControlPlane(DEFAULT_KUBE_VERSIONS) as plane:
        yield plane


def only(plane: ControlPlane, versions: Sequence[str]) -> ControlPlane:
    """``plane`` as if it ran only the API servers of ``versions`` (its servers are shared:
    nothing is stopped or started)."""
    view = copy.copy(plane)
    view.servers = {v: s for v, s in plane.servers.items() if v in versions}
    assert view.servers, (versions, list(plane.servers))
    return view


def objects(root: Path) -> list[Item]:
    """Every API object of a tree laid out like out/ (what the gate validates), each with
    its file relative to ``root``."""
    manifests, _, _, _ = discover(root)
    return items((rel, yamlio.read_back((root / rel).read_text())) for rel in manifests)


def kyverno_fixtures(root: Path) -> list[Item]:
    """The sample objects of every generated ``kyverno test`` under ``root`` (Pods and a
    Deployment, as the policy would see them, and the Pods it should make)."""
    _, _, policy_tests, _ = discover(root)
    return items(
        (path.relative_to(root).as_posix(), yamlio.read_back(path.read_text()))
        for directory in policy_tests
        for path in sorted((root / directory).glob("*.yaml"))
        if path.name != "kyverno-test.yaml"
    )


def path_of(session: Session, obj: dict[str, Any]) -> str:
    """The object's URL path on the server."""
    api_version, kind = obj["apiVersion"], obj["kind"]
    resource, namespaced = (session.resources(api_version) or {})[kind]
    base = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    meta = obj["metadata"]
    if namespaced:
        base += f"/namespaces/{meta.get('namespace', 'default')}"
    return f"{base}/{resource}/{urllib.parse.quote(meta['name'], safe='')}"


def apply(session: Session, obj: dict[str, Any], manager: str = "kubectl") -> Response:
    """``kubectl apply --server-side`` of one object, for real: no dry run, no
    ``--force-conflicts``."""
    query = urllib.parse.urlencode({"fieldManager": manager, "fieldValidation": "Strict"})
    return session.server.request(
        "PATCH", f"{path_of(session, obj)}?{query}", obj, "application/apply-patch+yaml"
    )


def get(server: ApiServer, path: str) -> dict[str, Any]:
    reply = server.request("GET", path)
    assert reply.status == 200, (path, reply.body)
    body: dict[str, Any] = reply.body
    return body
