"""The grafana-operator GrafanaDashboard (``dashboard.grafanaOperator``): it loads the
dashboard's ConfigMap, and kubeconform validates it against grafana-operator's pinned CRD."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import yaml

from compiler.api import compile_tree
from compiler.validation import run_gate

HEAD = "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\nmetadata: {name: e, namespace: n}\n"
CONFIGMAP = "n/e/configmap-e-dashboard.yaml"
OPERATOR = "n/e/grafanadashboard-e-dashboard.yaml"


def test_the_grafana_operator_dashboard_loads_the_configmap(
    tmp_path: Path, schema_dir: Path, need: Callable[..., None]
) -> None:
    """The GrafanaDashboard references the ConfigMap's key, and kubeconform validates it
    against grafana-operator's pinned CRD; a field the CRD lacks is refused."""
    need("kubeconform", "promtool")
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        HEAD + "spec:\n  dashboard:\n    grafanaOperator:\n"
        "      instanceSelector: {dashboards: grafana}\n      allowCrossNamespaceImport: true\n"
    )
    result = compile_tree([spec], tmp_path / "out", validate=True)
    assert result.ok, result.diagnostics
    out = tmp_path / "out"
    cr = yaml.safe_load((out / OPERATOR).read_text())
    assert cr["apiVersion"] == "grafana.integreatly.org/v1beta1"
    assert cr["spec"] == {
        "instanceSelector": {"matchLabels": {"dashboards": "grafana"}},
        "allowCrossNamespaceImport": True,
        "folder": "standbyc",
        "configMapRef": {"name": "e-dashboard", "key": "standbyc-n_e.json"},
    }
    cm = yaml.safe_load((out / CONFIGMAP).read_text())
    assert cr["spec"]["configMapRef"]["key"] in cm["data"]
    assert "grafanadashboard-e-dashboard.yaml" in (out / "n/e/kustomization.yaml").read_text()

    path = out / OPERATOR
    path.write_text(path.read_text().replace("  folder:", "  folderr:"))
    report = run_gate(out, schema_dir=schema_dir, display_root="out")
    errors = [f.render(report.kube_versions) for f in report.errors]
    assert errors == [
        "out/n/e/grafanadashboard-e-dashboard.yaml: GrafanaDashboard/e-dashboard: "
        "/spec/folderr: unknown field 'folderr'"
    ], errors
