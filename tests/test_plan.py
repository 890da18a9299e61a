"""The failover plan: the seed's numbers exactly, objectives met and missed, the chart."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree

import pytest

from compiler.api import compile_tree
from tests.conftest import OUT, REPO, run_cli

SEED = REPO / "specs" / "inference-engine.yaml"


def _plan(*args: str) -> dict[str, object]:
    result = run_cli("plan", *args, "--format", "json")
    assert result.code == 0, result.err
    doc: dict[str, object] = json.loads(result.out)
    return doc


def test_the_seed_scenario_numbers() -> None:
    (spec,) = _plan(str(SEED))["specs"]  # type: ignore[misc]
    failover = spec["failover"]
    # The design: 14 GiB x 3 replicas over 100 Gbit/s "3.5 s"; it is 360.78 Gbit, 3.61 s.
    assert failover["designCopy"] == {
        "formula": "14 GiB x 3 hot replicas / 100 Gbit/s",
        "bytes": 45097156608,
        "gigabits": 360.78,
        "seconds": 3.608,
    }
    phases = {p["name"]: p for p in failover["phases"]}
    assert [p["name"] for p in failover["phases"]] == [
        "detect", "drain", "migrate connections", "sync weights", "load weights",
    ]  # fmt: skip
    assert phases["detect"]["seconds"] == 30.0  # 3 failed checks x 10 s
    assert phases["detect"]["peakBitsPerSecond"] == 9830.4  # 0.6 probes/s x 2 KiB x 8
    assert phases["migrate connections"]["seconds"] == 50.0  # 10,000 x 5 ms, not "10-50 s"
    assert phases["migrate connections"]["bytes"] == 10000 * 4096
    weights = phases["sync weights"]
    assert weights["bytes"] == int(14 * 2**30 * 0.02)  # one generation behind: the delta
    assert weights["peakBitsPerSecond"] == 12.5e9  # the hot tier's 25 Gbit/s x 50 %
    assert weights["seconds"] == round(int(14 * 2**30 * 0.02) * 8 / 12.5e9, 3)
    # The hot tier's SGLang engines reload: 14 GiB read at 2 GB/s, not a 30 s warm-up.
    assert phases["load weights"]["seconds"] == 7.516
    assert failover["seconds"] == round(30 + 5 + 50 + weights["seconds"] + 7.516, 3)
    assert failover["met"] is True
    assert failover["verdict"] == "objective met: failover takes 92.71 s, within failover.rto 2m"
    health = spec["derived"]["healthChecks"]
    assert health["probesPerSecond"] == 0.6  # 1 prober x 6 targets / 10 s, not 100/s


def test_a_missed_objective_warns_and_strict_refuses(workdir: Path) -> None:
    spec = workdir / "specs" / "inference-engine.yaml"
    spec.write_text(spec.read_text().replace("rto: 2m", "rto: 30s"))
    result = run_cli("compile", "--no-validate")
    assert result.code == 0
    assert result.err.splitlines()[-1].endswith(
        "warning: specs/inference-engine.yaml: inference-system/inference-engine: "
        "objective missed: failover takes 92.71 s, over failover.rto 30s"
    )
    assert "spec.weightSync.verify is not set" in result.err  # the spec's own warning
    plan = (workdir / "out/inference-system/inference-engine/PLAN.md").read_text()
    assert "What would meet the objective:" in plan
    assert "- migrate connections in parallel: failover.migrationParallelism 7 takes" in plan
    assert "which meets the objective" in plan
    before = (workdir / "out/inference-system/inference-engine/PLAN.md").read_bytes()
    spec.write_text(spec.read_text().replace("rto: 30s", "rto: 20s"))
    strict = run_cli("compile", "--no-validate", "--strict")
    assert strict.code == 1
    assert strict.err.endswith("over failover.rto 20s; out/ was left unchanged\n")
    assert (workdir / "out/inference-system/inference-engine/PLAN.md").read_bytes() == before
    spec.write_text(
        spec.read_text().replace("weights: behind", "weights: behind\n    strict: true")
    )
    assert run_cli("compile", "--no-validate").code == 1  # failover.strict in the spec
    assert run_cli("plan", "--strict").code == 1


def test_plan_documents_are_not_applied() -> None:
    directory = OUT / "inference-system" / "inference-engine"
    assert (directory / "PLAN.md").is_file() and (directory / "plan.svg").is_file()
    kustomization = (directory / "kustomization.yaml").read_text()
    assert "PLAN.md" not in kustomization and "plan.svg" not in kustomization


@pytest.mark.parametrize("spec", sorted((REPO / "specs").glob("*.yaml")), ids=lambda p: p.stem)
def test_the_chart_is_well_formed_and_byte_stable(spec: Path, tmp_path: Path) -> None:
    runs = [
        compile_tree([spec], tmp_path / name / "out", validate=False, write=False).files
        for name in ("a", "b")
    ]
    charts = [text for files in runs for path, text in files.items() if path.endswith("/plan.svg")]
    assert len(charts) == 2 and charts[0] == charts[1]
    root = ElementTree.fromstring(charts[0])
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert root.get("width") == "820"  # GitHub shows it whole in a PR at its default width
    texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "link" in texts and "hot pod limit" in texts and "objective met" in texts
