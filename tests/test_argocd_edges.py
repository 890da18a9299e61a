"""The ApplicationSet's edges, each as an Argo CD user meets it: other YAML beside the specs,
a spec's Application reaching a cluster before the CRD it needs, and one broken spec."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.test_argocd import PLUGIN, _applications, _param_env, _run, make_checkout


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return make_checkout(tmp_path)


def _generate(checkout: Path, app: dict[str, Any], **env: str) -> Any:
    return _run(PLUGIN["spec"]["generate"]["command"], checkout, KUBE_VERSION="v1.36.0",
                ARGOCD_APP_NAME=app["metadata"]["name"], **_param_env(
                    app["spec"]["source"]["plugin"]), **env)  # fmt: skip


def test_other_yaml_in_specs_makes_no_application(checkout: Path) -> None:
    """A kustomization.yaml and a YAML file with no kind beside the specs: the git
    generator's selector keeps only StandbySpec files, so no Application would render
    them (and fail)."""
    before = sorted(a["metadata"]["name"] for a in _applications(checkout, "prod-eu"))
    (checkout / "specs" / "kustomization.yaml").write_text(
        "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources: []\n"
    )
    (checkout / "specs" / "owners.yaml").write_text("owners: [ml-platform]\n")
    after = sorted(a["metadata"]["name"] for a in _applications(checkout, "prod-eu"))
    assert (
        after
        == before
        == [
            "standbyc-prod-eu-cluster",
            "standbyc-prod-eu-grpc-llm",
            "standbyc-prod-eu-inference-engine",
        ]
    )


def test_a_spec_application_waits_for_the_crd_it_needs(checkout: Path) -> None:
    """Each spec's Application renders a CiliumEgressQoS whose CRD only the cluster's
    Application installs: its sync starts without a dry run of the missing kind and is
    retried until the CRD is there."""
    apps = {a["metadata"]["name"]: a for a in _applications(checkout, "prod-eu")}
    spec_app = apps["standbyc-prod-eu-inference-engine"]
    result = _generate(checkout, spec_app, ARGOCD_ENV_VALIDATE="false")
    assert result.returncode == 0, result.stderr
    kinds = {o["kind"] for o in yaml.safe_load_all(result.stdout)}
    assert "CiliumEgressQoS" in kinds and "CustomResourceDefinition" not in kinds
    policy = spec_app["spec"]["syncPolicy"]
    assert "SkipDryRunOnMissingResource=true" in policy["syncOptions"]
    retry = policy["retry"]
    assert retry["limit"] >= 5 and retry["backoff"]["maxDuration"] == "5m"


def test_a_broken_spec_fails_only_its_own_application(checkout: Path) -> None:
    spec = checkout / "specs" / "grpc-llm.yaml"
    spec.write_text(spec.read_text().replace("egress: 100Gbit/s", "egress: 100Gbps/s"))
    apps = {a["metadata"]["name"]: a for a in _applications(checkout, "prod-eu")}
    broken = _generate(checkout, apps["standbyc-prod-eu-grpc-llm"])
    assert broken.returncode == 2 and broken.stdout == ""
    assert "specs/grpc-llm.yaml:" in broken.stderr
    cluster = _generate(checkout, apps["standbyc-prod-eu-cluster"])  # validated, too
    assert cluster.returncode == 0, cluster.stderr
    assert [o["kind"] for o in yaml.safe_load_all(cluster.stdout)] == ["CustomResourceDefinition"]
    assert "specs/grpc-llm.yaml:" in cluster.stderr
    assert "left out of --part cluster; its own Application reports it" in cluster.stderr
    healthy = _generate(checkout, apps["standbyc-prod-eu-inference-engine"])
    assert healthy.returncode == 0, healthy.stderr


def test_the_cluster_part_fails_when_no_spec_compiles(checkout: Path) -> None:
    for spec in (checkout / "specs").glob("*.yaml"):
        spec.write_text(spec.read_text().replace("Gbit/s", "Gbps/s"))
    apps = {a["metadata"]["name"]: a for a in _applications(checkout, "prod-eu")}
    result = _generate(checkout, apps["standbyc-prod-eu-cluster"], ARGOCD_ENV_VALIDATE="false")
    assert result.returncode == 2 and result.stdout == ""
