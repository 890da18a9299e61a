"""No dangling references in out/: everything an emitted object points at is emitted by the
same spec, or is listed in the compile summary's "requires" as the user's to provide."""

from __future__ import annotations

import urllib.parse
from pathlib import Path
from typing import Any

import pytest
import yaml

from compiler.api import compile_tree
from tests.conftest import CASES, REPO

SPECS = [*sorted((REPO / "specs").glob("*.yaml")), *sorted(CASES.glob("*/spec.yaml"))]


def _objects(files: dict[str, str], directory: str) -> list[dict[str, Any]]:
    return [
        yaml.safe_load(text)
        for path, text in sorted(files.items())
        if path.startswith(directory + "/") and "/tests/" not in path and path.endswith(".yaml")
        and not path.endswith("kustomization.yaml")
    ]  # fmt: skip


def _pod_templates(objects: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out = []
    for obj in objects:
        spec = obj.get("spec", {})
        if obj["kind"] == "CronJob":
            spec = spec["jobTemplate"]["spec"]
        if obj["kind"] in ("Job", "CronJob", "Deployment"):
            out.append(spec["template"])
    return out


def _matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def _check_pod(
    pod: dict[str, Any], emitted: dict[str, dict[str, Any]], requires: str, ns: str
) -> None:
    spec = pod["spec"]
    if account := spec.get("serviceAccountName"):
        assert account in emitted.get("ServiceAccount", {}), account
    for volume in spec.get("volumes", []):
        if claim := volume.get("persistentVolumeClaim"):
            assert f"PersistentVolumeClaim {ns}/{claim['claimName']}" in requires, claim
        # A Secret or ConfigMap the user provides (store keys, weightSync.verify's trust):
        # named in requires, with each key mounted.
        for kind, field, name in (("Secret", "secret", "secretName"),
                                  ("ConfigMap", "configMap", "name")):  # fmt: skip
            if source := volume.get(field):
                assert f"{kind} {ns}/{source[name]}" in requires, volume
                for item in source.get("items", []):
                    assert f"{kind} {ns}/{source[name]} with the key {item['key']}" in requires
    for container in spec["containers"]:
        args = container.get("args", [])
        if "--source" in args:
            url = urllib.parse.urlsplit(args[args.index("--source") + 1])
            host = url.hostname or ""
            if host.endswith(".svc"):  # in the cluster: a Service this spec emits
                service, namespace = host.split(".")[:2]
                assert namespace == ns
                assert emitted["Service"][service]["spec"]["ports"][0]["port"] == url.port
            else:
                assert f"a store served at {url.geturl()}" in requires
        if "--pushgateway" in args:
            assert args[args.index("--pushgateway") + 1] in requires


def _case_id(path: Path) -> str:
    return path.parent.name if path.name == "spec.yaml" else path.stem


@pytest.mark.parametrize("spec", SPECS, ids=_case_id)
def test_every_reference_resolves(spec: Path, tmp_path: Path) -> None:
    result = compile_tree([spec], tmp_path / "out", validate=False, write=False)
    assert result.ok, result.diagnostics
    (one,) = result.specs
    objects = _objects(result.files, one.directory)
    emitted: dict[str, dict[str, dict[str, Any]]] = {}
    for obj in objects:
        emitted.setdefault(obj["kind"], {})[obj["metadata"]["name"]] = obj
    requires = "\n".join(one.plan.requirements())
    pods = _pod_templates(objects)
    for pod in pods:
        _check_pod(pod, emitted, requires, one.plan.namespace)
    labels_of_pods = [p["metadata"]["labels"] for p in pods]
    for svc in emitted.get("Service", {}).values():
        if any(_matches(svc["spec"]["selector"], labels) for labels in labels_of_pods):
            continue
        # Or the user's engine pods of a tier, by the engine's selector: named in requires.
        name = svc["metadata"]["name"]
        tier = next(t for t in one.plan.sync.tiers if t.reload and t.reload.service == name)
        assert svc["spec"]["selector"] == tier.selector
        assert f"through the headless Service {name}" in requires
    for policy in emitted.get("NetworkPolicy", {}).values():
        selected = policy["spec"]["podSelector"]["matchLabels"]
        assert any(_matches(selected, labels) for labels in labels_of_pods), policy
        for rule in policy["spec"]["ingress"]:
            for peer in rule["from"]:
                if "ipBlock" in peer:  # an address, not a reference (Istio ambient's probes)
                    continue
                allowed = peer["podSelector"]["matchLabels"]
                assert any(_matches(allowed, labels) for labels in labels_of_pods), peer
