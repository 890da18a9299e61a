"""The Grafana dashboard: in the SDK's schema, deterministic, and each spec option (the
sidecar label and folder, the grafana-operator GrafanaDashboard, off) does what it says.
Every panel's query is proven against a real Prometheus in tests/sync/test_dashboard_queries.py.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from compiler.api import compile_tree
from compiler.render import grafana, panels
from tests.conftest import REPO, golden_trees, run_cli
from tests.grafana_schema import problems

HEAD = "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\nmetadata: {name: e, namespace: n}\n"
CONFIGMAP = "n/e/configmap-e-dashboard.yaml"
OPERATOR = "n/e/grafanadashboard-e-dashboard.yaml"  # tests/gate/test_dashboard_crd.py


def _compile(tmp_path: Path, body: str = "") -> Path:
    tmp_path.mkdir(exist_ok=True)
    spec = tmp_path / "spec.yaml"
    spec.write_text(HEAD + body)
    out = tmp_path / "out"
    result = run_cli("compile", str(spec), "--out", str(out), "--no-validate")
    assert result.code == 0, result.err
    return out


def _board(configmap: dict[str, Any]) -> dict[str, Any]:
    (text,) = configmap["data"].values()
    doc: dict[str, Any] = json.loads(text)
    return doc


def _dashboards() -> list[Path]:
    out: list[Path] = []
    for _, tree in golden_trees():
        out += sorted(tree.rglob("configmap-*-dashboard.yaml"))
    return sorted(set(out))


def test_every_committed_dashboard_is_in_the_sdk_schema() -> None:
    """The example specs' and every golden case's dashboard, read back by the Grafana
    Foundation SDK's own models: nothing unknown, nothing missing, every type right."""
    boards = _dashboards()
    assert len(boards) >= 8, boards
    for path in boards:
        doc = _board(yaml.safe_load(path.read_text()))
        assert problems(doc) == [], path
        # Sorted keys, a line per top-level key and per panel: the bytes follow from the object.
        (text,) = yaml.safe_load(path.read_text())["data"].values()
        assert text == grafana.text(doc), path
        assert json.loads(text) == doc


def test_the_schema_check_catches_what_grafana_would_not_read() -> None:
    """Broken on purpose: a key the schema lacks, a wrong type, a value outside an enum."""
    doc = _board(yaml.safe_load(_dashboards()[0].read_text()))
    doc["panels"][1]["legendd"] = {}
    doc["panels"][1]["targets"][0]["expr"] = 42
    doc["panels"][1]["fieldConfig"]["defaults"]["custom"]["thresholdsStyle"]["mode"] = "wavy"
    doc["graphTooltip"] = 9
    found = problems(doc)
    assert [p.split(":")[0] for p in found] == [
        "$.panels[1].legendd",
        "$.graph_tooltip",
        "$.panels[1].targets[0].expr",
        "$.panels[1].field_config.defaults.custom.thresholds_style.mode",
    ], found


def test_the_default_is_a_configmap_for_kube_prometheus_stacks_sidecar(tmp_path: Path) -> None:
    out = _compile(tmp_path)
    cm = yaml.safe_load((out / CONFIGMAP).read_text())
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"]["grafana_folder"] == "standbyc"
    assert list(cm["data"]) == ["standbyc-n_e.json"]
    board = _board(cm)
    assert board["uid"] == "n_e"
    assert [v["name"] for v in board["templating"]["list"]] == ["datasource", "namespace"]
    assert board["annotations"]["list"][0]["expr"] == (
        'ALERTS{alertstate="firing", namespace="$namespace", standbyc_spec="e"}'
    )
    assert not (out / OPERATOR).exists()
    kustomization = (out / "n/e/kustomization.yaml").read_text()
    assert "configmap-e-dashboard.yaml" in kustomization


def test_the_sidecar_label_and_folder_are_set_by_the_spec(tmp_path: Path) -> None:
    out = _compile(
        tmp_path,
        "spec:\n  dashboard:\n    sidecarLabels: {grafana_dashboard: inference, team: ml}\n"
        "    folder: Inference failover\n    folderAnnotation: k8s-sidecar-target-directory\n",
    )
    meta = yaml.safe_load((out / CONFIGMAP).read_text())["metadata"]
    assert {k: meta["labels"][k] for k in ("grafana_dashboard", "team")} == {
        "grafana_dashboard": "inference", "team": "ml"
    }  # fmt: skip
    assert meta["annotations"]["k8s-sidecar-target-directory"] == "Inference failover"
    assert "grafana_folder" not in meta["annotations"]


def test_a_folder_that_is_a_path_is_refused(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(HEAD + "spec:\n  dashboard: {folder: a/b}\n")
    result = run_cli("compile", str(spec), "--out", str(tmp_path / "out"), "--no-validate")
    assert result.code == 2
    assert f"{spec}:5:23: spec.dashboard.folder:" in result.err, result.err


def test_off_emits_no_dashboard_and_changes_nothing_else(tmp_path: Path) -> None:
    on = _compile(tmp_path / "on")
    off = _compile(tmp_path / "off", "spec:\n  dashboard: {enabled: false}\n")
    files_on = {p.relative_to(on).as_posix() for p in on.rglob("*") if p.is_file()}
    files_off = {p.relative_to(off).as_posix() for p in off.rglob("*") if p.is_file()}
    assert files_on - files_off == {CONFIGMAP}
    assert files_off - files_on == set()
    for rel in sorted(files_off - {"n/e/kustomization.yaml", "n/e/PLAN.md", "n/e/RUNBOOK.md"}):
        assert (on / rel).read_bytes() == (off / rel).read_bytes(), rel
    assert "dashboard" not in (off / "n/e/kustomization.yaml").read_text()
    assert "Grafana dashboard" in (on / "n/e/PLAN.md").read_text()
    assert "Grafana dashboard" not in (off / "n/e/PLAN.md").read_text()
    assert "the dashboard is `n_e`" in (on / "n/e/RUNBOOK.md").read_text()
    assert "dashboard" not in (off / "n/e/RUNBOOK.md").read_text()


@pytest.mark.parametrize("spec", ["inference-engine", "grpc-llm"])
def test_panels_per_spec(spec: str, tmp_path: Path) -> None:
    """The example specs' panels: a Failover row, a row per tier with replicas (egress,
    ready pods, and the weights when the tier syncs), and a Weight sync row."""
    result = compile_tree([Path("specs") / f"{spec}.yaml"], tmp_path / "out", validate=False)
    (e,) = [e for e in result.objects if e.name.endswith("-dashboard")]
    board = _board(e.obj)
    rows = [p["title"] for p in board["panels"] if p["type"] == "row"]
    panels = [p for p in board["panels"] if p["type"] == "timeseries"]
    want = {
        "inference-engine": (["Failover", "Tier hot", "Tier warm", "Tier cold", "Weight sync"], 14),
        "grpc-llm": (["Failover", "Tier hot", "Tier warm", "Weight sync"], 11),
    }[spec]
    assert (rows, len(panels)) == want
    ids = [p["id"] for p in board["panels"]]
    assert ids == list(range(1, len(ids) + 1))
    for p in panels:
        assert re.search(r"\b(pages|No alert pages)\b", p["description"]), p["title"]


def test_the_uid_fits_grafanas_forty_characters() -> None:
    class Plan:
        namespace, name = "a" * 63, "b" * 63

    uid = panels.uid(Plan())  # type: ignore[arg-type]
    assert len(uid) <= 40 and re.fullmatch(r"[a-zA-Z0-9_-]+", uid)


@pytest.mark.parametrize("tree", ["inference-system/inference-engine", "llm-serving/llm-grpc"])
def test_the_failover_lines_are_the_plans_takeover(tree: str, tmp_path: Path) -> None:
    """The Failover row draws what PLAN.md says the takeover sends (the failed pods'
    serving traffic on the takeover tier), not a weight sync; the takeover tier's own egress
    panel draws it per pod."""
    namespace, name = tree.split("/")
    spec = next(s for s in (REPO / "specs").glob("*.yaml") if f"name: {name}" in s.read_text())
    result = compile_tree([spec], tmp_path / "out", validate=False, write=False)
    plan = result.specs[0].plan
    e = plan.failover.egress
    board = _board(yaml.safe_load(result.files[f"{tree}/configmap-{name}-dashboard.yaml"]))
    by_title = {p["title"]: p for p in board["panels"] if "targets" in p}
    failover = by_title["Failover: egress of every standby tier"]
    lines = {t["legendFormat"]: t["expr"] for t in failover["targets"]}
    expected = min(e.per_pod, e.cap) * e.replicas
    (line,) = [expr for legend, expr in lines.items() if legend.startswith("PLAN.md takeover")]
    assert float(line.removeprefix("vector(").removesuffix(")")) == pytest.approx(expected)
    assert "weight sync is not a failover's traffic" in failover["description"]
    own = by_title[f"{e.tier}: egress per pod and in total"]
    per_pod = [t["expr"] for t in own["targets"]
               if t["legendFormat"].startswith("PLAN.md takeover per pod")]  # fmt: skip
    assert [float(x.removeprefix("vector(").removesuffix(")")) for x in per_pod] == [
        pytest.approx(min(e.per_pod, e.cap))
    ]
    assert namespace == plan.namespace


def test_specs_whose_names_flatten_alike_get_dashboards_of_their_own(tmp_path: Path) -> None:
    """team-a/llm and team/a-llm: their dashboards' uids and the files the Grafana sidecar
    writes differ, so neither replaces the other."""
    specs = tmp_path / "specs"
    specs.mkdir()
    for n, (namespace, name) in enumerate((("team-a", "llm"), ("team", "a-llm"))):
        (specs / f"spec-{n}.yaml").write_text(
            "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\n"
            f"metadata: {{name: {name}, namespace: {namespace}}}\n"
        )
    result = compile_tree([specs], tmp_path / "out", validate=False, write=False)
    uids, keys = set(), set()
    for one in result.specs:
        cm = yaml.safe_load(
            result.files[f"{one.directory}/configmap-{one.plan.name}-dashboard.yaml"]
        )
        (key,) = cm["data"]
        keys.add(key)
        uids.add(_board(cm)["uid"])
    assert len(uids) == 2 and len(keys) == 2, (uids, keys)
    assert uids == {"team-a_llm", "team_a-llm"}
    # Cluster-scoped objects, one per spec, are as distinct: the QoS policies.
    policies = [p for p in result.files if "/clusterpolicy-" in p]
    assert len(policies) == 2 and len({p.rsplit("/", 1)[1] for p in policies}) == 2
