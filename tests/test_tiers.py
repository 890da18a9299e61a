"""Which tiers a spec runs: exactly the ones it writes (none written: the design's three),
and a tier is turned off by leaving it out, by null, or by ``replicas: 0`` alone. Each
test is a step a newcomer took, as they took it."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest

from tests.conftest import Run, run_cli, tree

HEAD = (
    "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\nmetadata: {name: solo, namespace: ml}\n"
)


def _compile(tmp_path: Path, body: str, name: str = "spec") -> tuple[Path, Run]:
    """Compile ``body`` as <name>/spec.yaml into <name>/out (the same file name each time:
    the header of every file names it)."""
    (tmp_path / name).mkdir()
    spec = tmp_path / name / "spec.yaml"
    spec.write_text(HEAD + body)
    out = tmp_path / name / "out"
    return out, run_cli("compile", str(spec), "--out", str(out), "--no-validate")


def test_only_the_hot_tier_written_runs_only_the_hot_tier(tmp_path: Path) -> None:
    """The README's spec cut down to its hot tier: one weight-sync Job, one tier in the
    summary, and the claim sized for that one tier."""
    out, result = _compile(tmp_path, "spec:\n  tiers:\n    hot: {replicas: 3, egress: 25Gbit/s}\n")
    assert result.code == 0, result.err
    text = result.out
    assert "1 Job," in text
    assert "tier hot: 3 x egress 25Gbit/s" in text
    assert "tier warm" not in text and "tier cold" not in text
    assert "at least 42 GiB (3 x the model per sync tier" in text  # not 126 GiB
    files = sorted(p.name for p in (out / "ml" / "solo").iterdir())
    assert [f for f in files if f.startswith("job-")] == ["job-solo-weight-sync-hot.yaml"]
    rules = (out / "ml" / "solo" / "prometheusrule-solo-failover.yaml").read_text()
    assert "weight-sync-warm" not in rules and "weight-sync-cold" not in rules


@pytest.mark.parametrize(
    "off", ["warm: null", "warm: {replicas: 0}", "warm: {replicas: 0, egress: 10Gbit/s}", ""]
)
def test_every_way_of_turning_a_tier_off_compiles_to_the_same_tree(
    tmp_path: Path, off: str
) -> None:
    body = "spec:\n  tiers:\n    hot: {replicas: 2, egress: 25Gbit/s}\n"
    base, first = _compile(tmp_path, body, "left-out")
    other, second = _compile(tmp_path, body + (f"    {off}\n" if off else ""), "off")
    assert first.code == 0 and second.code == 0, second.err
    assert tree(base) == tree(other)
    assert not list(base.rglob("*warm*"))


def test_no_tiers_written_is_the_designs_three(tmp_path: Path) -> None:
    _, result = _compile(tmp_path, "")
    assert result.code == 0, result.err
    for line in ("tier hot: 3 x egress 25Gbit/s", "tier warm: 2 x egress 10Gbit/s",
                 "tier cold: 1 x egress 5Gbit/s"):  # fmt: skip
        assert line in result.out


@pytest.mark.parametrize(
    ("tier", "message"),
    [
        (
            "warm: {replicas: 2}",
            "7:11: spec.tiers.warm.egress: a tier with replicas needs egress, its per-pod "
            "egress limit (such as 10Gbit/s); replicas: 0, or warm: null, turns the tier off",
        ),
        (
            "warm: {egress: 10Gbit/s}",
            "7:5: spec.tiers.warm.replicas: required field is missing: how many standby pods "
            "the warm tier runs; replicas: 0, or warm: null, turns the tier off",
        ),
        (
            "warm: off",
            "7:11: spec.tiers.warm: a tier is written {replicas: N, egress: 10Gbit/s}; "
            "replicas: 0, or warm: null, turns the tier off",
        ),
    ],
)
def test_a_tier_written_wrong_says_how_to_write_it_and_turn_it_off(
    tmp_path: Path, tier: str, message: str
) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        HEAD + f"spec:\n  tiers:\n    hot: {{replicas: 2, egress: 25Gbit/s}}\n    {tier}\n"
    )
    result = run_cli("compile", str(spec), "--out", str(tmp_path / "out"), "--no-validate")
    assert result.code == 2
    assert result.err == f"standbyc: {spec}:{message}\n"
    assert "Input should be" not in result.err and "dictionary" not in result.err


def test_a_takeover_tier_left_out_says_so(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(HEAD + "spec:\n  tiers:\n    warm: {replicas: 2, egress: 10Gbit/s}\n")
    result = run_cli("compile", str(spec), "--out", str(tmp_path / "out"), "--no-validate")
    assert result.code == 2
    assert (
        "spec.tiers.hot.replicas: the hot tier is off (not written), but a failover is planned "
        "onto it (failover.takeover defaults to hot): give it replicas, or set "
        "failover.takeover: warm"
    ) in result.err


def _combinations() -> list[tuple[str, ...]]:
    names = ("hot", "warm", "cold")
    return [c for n in (1, 2, 3) for c in itertools.combinations(names, n)]


def test_the_rules_are_pint_clean_for_every_tier_combination(tmp_path: Path) -> None:
    """All seven sets of tiers, each with its weight sync run by Argo CD's hook and by a
    schedule (a CronJob's Jobs carry a suffix the rules match), through the real gate: pint
    finds nothing in any of the fourteen rule files (one tier used to be a redundant
    regexp, tier=~"hot")."""
    egress = {"hot": "25Gbit/s", "warm": "10Gbit/s", "cold": "5Gbit/s"}
    specs = tmp_path / "specs"
    specs.mkdir()
    for combo in _combinations():
        for trigger in ("argocdHook", "schedule"):
            name = "-".join(combo) + ("-cron" if trigger == "schedule" else "")
            tiers = "".join(f"    {t}: {{replicas: 2, egress: {egress[t]}}}\n" for t in combo)
            schedule = ", schedule: '*/30 * * * *'" if trigger == "schedule" else ""
            (specs / f"{name}.yaml").write_text(
                "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\n"
                f"metadata: {{name: {name}, namespace: ml}}\nspec:\n  tiers:\n{tiers}"
                f"  failover: {{takeover: {combo[0]}}}\n"
                f"  weightSync:\n    trigger: {{type: {trigger}{schedule}}}\n"
            )
    result = run_cli("compile", str(specs), "--out", str(tmp_path / "out"), "--format", "json")
    assert result.code == 0, result.out
    doc = json.loads(result.out)
    assert len(doc["specs"]) == 14
    assert doc["validation"]["pint"] == "ran offline on 14 PrometheusRules"
    assert [f for f in doc["validation"]["findings"] if f["tool"] == "pint"] == []
