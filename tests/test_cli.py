"""Exit codes and output formats shared by every command."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from compiler import decorate
from compiler import kinds as table
from compiler.cli import build_parser
from tests.conftest import CASES, REPO, Run, run_cli


def test_no_command_is_a_usage_error() -> None:
    result = run_cli()
    assert result.code == 2
    assert "the following arguments are required: COMMAND" in result.err


def test_help_exits_zero() -> None:
    assert run_cli("--help").code == 0


def test_internal_error_exits_three_with_traceback(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def boom(*_: object) -> None:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(decorate, "order", boom)
    result = run_cli("compile", "--no-validate")
    assert result.code == 3
    assert "Traceback" in result.err
    assert "RuntimeError: simulated bug" in result.err
    assert not (workdir / "out").exists()


def test_user_error_has_no_traceback_unless_debug(workdir: Path) -> None:
    plain = run_cli("compile", "missing.yaml")
    assert plain.code == 2
    assert "Traceback" not in plain.err
    debug = run_cli("--debug", "compile", "missing.yaml")
    assert debug.code == 2
    assert "Traceback" in debug.err


def test_compile_json_summary(workdir: Path) -> None:
    result = run_cli("compile", "--no-validate", "--format", "json")
    assert result.code == 0, result.err
    summary = json.loads(result.out)
    seed = next(
        s for s in summary["specs"] if s["directory"] == "inference-system/inference-engine"
    )
    assert seed["source"] == "specs/inference-engine.yaml"
    assert seed["objects"]["Job"] == 3
    # 14 GiB to 6 standbys over 100 Gbit/s: 721.55 Gbit, 7.2155 s at line rate.
    assert seed["derived"]["fullCopy"]["seconds"] == 7.215545
    # 1 prober x 6 targets / 10 s = 0.6 probes/s, x 2 KiB = 1228.8 B/s.
    assert seed["derived"]["healthChecks"]["probesPerSecond"] == 0.6
    assert seed["derived"]["healthChecks"]["bytesPerSecond"] == 1228.8
    assert summary["files"]["removed"] == 0


def test_compile_text_summary(workdir: Path) -> None:
    result = run_cli("compile", "--no-validate")
    assert result.code == 0
    assert "inference-system/inference-engine  <- specs/inference-engine.yaml" in result.out
    assert "health checks: 1 prober x 6 targets / 10s = 0.6 probes/s" in result.out


def test_every_option_has_help_text() -> None:
    missing: list[str] = []

    def walk(parser: argparse.ArgumentParser, prefix: str) -> None:
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                for name, sub in action.choices.items():
                    walk(sub, f"{prefix} {name}")
            elif not isinstance(action, argparse._HelpAction) and not action.help:
                missing.append(f"{prefix} {action.option_strings or action.dest}")

    walk(build_parser(), "standbyc")
    assert missing == []


def test_top_level_help_speaks_to_users() -> None:
    result = run_cli("--help")
    assert result.code == 0
    assert "Compile standby specs" in result.out and "Exit codes:" in result.out
    assert "dispatch" not in result.out


UNSET = (" is not set: the seed's ", "spec.alerts.outUrl is not set: ")


def told(err: str) -> str:
    """stderr without the warnings on fields left to a default that decides something
    (``compiler.unset``: every minimal spec here gets them), as standbyc would print it."""
    lines = err.removeprefix("standbyc: ").splitlines(keepends=True)
    kept = "".join(line for line in lines if not any(u in line for u in UNSET))
    return f"standbyc: {kept}" if kept.startswith("warning: ") else kept


def unsigned(spec: Path, where: str) -> str:
    """The warning every spec without weightSync.verify gets (after the first warning)."""
    return (
        f"warning: {spec}:{where}: spec.weightSync: spec.weightSync.verify is not set: the "
        "weight-sync Jobs swap in whatever the store serves, so anyone who can write the "
        "store (or answer in its place) changes what is served; sign generations (weights "
        "publish --sign-key) and set verify\n"
    )


def test_other_yaml_in_the_specs_directory_is_skipped_and_said(tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "engine.yaml").write_text(
        "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\nmetadata: {name: e, namespace: n}\n"
    )
    (specs / "kustomization.yaml").write_text("kind: Kustomization\nresources: [engine.yaml]\n")
    result = run_cli("compile", str(specs), "--out", str(tmp_path / "out"), "--no-validate")
    assert result.code == 0
    assert told(result.err) == (
        f"standbyc: warning: {specs}/kustomization.yaml (kind: Kustomization): skipped, "
        f"not a StandbySpec\n{unsigned(specs / 'engine.yaml', '1:1')}"
    )


def test_an_unsigned_weight_sync_is_warned_about_once_per_spec(tmp_path: Path) -> None:
    """Three sync tiers, one warning; a spec with weightSync.verify, none."""
    specs = tmp_path / "specs"
    specs.mkdir()
    (specs / "a.yaml").write_text(
        "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\nmetadata: {name: a, namespace: n}\n"
    )
    shutil.copyfile(CASES / "verify-key/spec.yaml", specs / "b.yaml")
    result = run_cli("compile", str(specs), "--out", str(tmp_path / "out"), "--no-validate")
    assert result.code == 0, result.err
    assert told(result.err) == "standbyc: " + unsigned(specs / "a.yaml", "1:1")
    assert result.out.count("Secret serving/model-signing with the key publisher.pub") == 1


def test_a_spec_without_a_namespace_is_warned_about(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text("apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\nmetadata:\n  name: e\n")
    result = run_cli("compile", str(spec), "--out", str(tmp_path / "out"), "--no-validate")
    assert result.code == 0
    assert told(result.err) == (
        f"standbyc: warning: {spec}:4:3: metadata: metadata.namespace is not set, so the "
        f"objects go to the namespace default\n{unsigned(spec, '1:1')}"
    )


def test_empty_rule_labels_are_warned_about(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\nmetadata: {name: e, namespace: n}\n"
        "spec:\n  alerts:\n    ruleLabels: {}\n"
    )
    result = run_cli("compile", str(spec), "--out", str(tmp_path / "out"), "--no-validate")
    assert result.code == 0
    assert told(result.err) == (
        f"standbyc: warning: {spec}:6:17: spec.alerts.ruleLabels: spec.alerts.ruleLabels is "
        "empty: a Prometheus with a ruleSelector (as kube-prometheus-stack sets one, release: "
        f"<its release>) does not load the PrometheusRule\n{unsigned(spec, '5:3')}"
    )
    assert "requires: a Prometheus with an empty ruleSelector" in result.out


def test_specs_with_other_label_keys_get_one_allowlist_for_all(tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    specs.mkdir()
    head = (
        "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\nmetadata: {name: %s, namespace: n}\n"
    )
    (specs / "a.yaml").write_text(head % "a")
    (specs / "b.yaml").write_text(
        head % "b" + "spec:\n  engine: {selector: {app.kubernetes.io/name: b}, tierLabel: tier}\n"
    )
    result = run_cli("compile", str(specs), "--out", str(tmp_path / "out"), "--no-validate")
    assert result.code == 0, result.err
    assert (
        "  one kube-state-metrics for all 2 specs: "
        "--metric-labels-allowlist=pods=[app,app.kubernetes.io/name,tier],"
        "namespaces=[kubernetes.io/metadata.name]\n"
    ) in result.out
    alone = run_cli("compile", str(specs / "a.yaml"), "--out", str(tmp_path / "out"),
                    "--no-validate")  # fmt: skip
    assert "one kube-state-metrics" not in alone.out


def _named(tmp_path: Path, name: str, extra: str = "") -> Run:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        f"apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\nmetadata: {{name: {name}, "
        "namespace: n}\nspec:\n  qos: {outputs: [ciliumEgressQoS]}\n" + extra
    )
    return run_cli("compile", str(spec), "--out", str(tmp_path / "out"), "--no-validate")


def test_names_up_to_each_kinds_limit_compile(tmp_path: Path) -> None:
    """A 39-character name (without a Kyverno policy, 63 at most) and no weight-report
    CronJob: its ConfigMaps (253 allowed) are longer than 63 and are accepted; the cold
    tier's Job, named with its spec's digest, is 63, at its limit. With the CronJob, 38
    characters: it is 52, at its."""
    name = "e" * 39
    result = _named(tmp_path, name, "  weightSync: {report: {schedule: null}}\n")
    assert result.code == 0, result.err
    written = {p.name for p in (tmp_path / "out" / "n" / name).iterdir()}
    assert f"configmap-{name}-grpc-channel-args.yaml" in written
    assert f"job-{name}-weight-sync-cold.yaml" in written
    job = yaml.safe_load(
        (tmp_path / "out" / "n" / name / f"job-{name}-weight-sync-cold.yaml").read_text()
    )
    assert len(job["metadata"]["name"]) == 63
    assert not any(w.startswith("cronjob-") for w in written)
    name = "e" * 38
    result = _named(tmp_path, name)
    assert result.code == 0, result.err
    assert (tmp_path / "out" / "n" / name / f"cronjob-{name}-weight-report.yaml").exists()


def test_a_name_too_long_for_the_report_cronjob_says_how_to_go_without_it(
    tmp_path: Path,
) -> None:
    result = _named(tmp_path, "e" * 39)
    assert result.code == 2
    assert (
        "CronJob name 'eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee-weight-report' is 53" in result.err
    )
    assert "(or set weightSync.report.schedule: null, for no weight-report CronJob)" in result.err


def test_json_on_failure_is_one_document(tmp_path: Path) -> None:
    result = run_cli("weights", "verify", str(tmp_path / "missing"), "--manifest",
                     str(tmp_path / "m.json"), "--format", "json")  # fmt: skip
    assert result.code == 2
    doc = json.loads(result.out)
    assert doc["ok"] is False and doc["exitCode"] == 2
    assert doc["error"].endswith("m.json: cannot open manifest: No such file or directory")


def test_a_reader_that_goes_away_keeps_the_exit_code(tmp_path: Path) -> None:
    """`standbyc compile | head -1`: exit 0 and no message, as the compile succeeded."""
    (tmp_path / "specs").mkdir()
    (tmp_path / "specs" / "s.yaml").write_text(
        "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\nmetadata: {name: e, namespace: n}\n"
    )
    proc = subprocess.run(
        f"{sys.executable} -m compiler compile --no-validate | head -1; "
        "echo ${PIPESTATUS[0]} >&2",
        shell=True, executable="/bin/bash", cwd=tmp_path, capture_output=True, text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
        check=False,
    )  # fmt: skip
    assert proc.stdout.startswith("wrote out/")
    assert told(proc.stderr) == (
        unsigned(Path("specs/s.yaml"), "1:1").replace("warning", "standbyc: warning") + "0\n"
    )


# --- messages a newcomer met, each as it reads now ----------------------------------------


def test_a_bandwidth_in_bytes_is_said_in_bits(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\n"
        "metadata: {name: engine, namespace: serving}\n"
        "spec:\n  network: {link: 200Gbit/s}\n  tiers:\n    hot: {replicas: 1, egress: 10 GB/s}\n"
    )
    result = run_cli("compile", str(spec), "--out", str(tmp_path / "out"), "--no-validate")
    assert result.code == 0, result.err
    assert (
        f"standbyc: warning: {spec}:7:32: spec.tiers.hot.egress: '10 GB/s' is bytes per "
        "second, 80 Gbit/s: a capital B is a byte. If you meant bits, write 10 Gb/s"
    ) in result.err


def test_no_validate_says_every_validator_it_skips() -> None:
    result = run_cli("compile", "--help")
    assert "--no-validate" in result.out
    flat = " ".join(result.out.split())
    assert "skip the validators (kubeconform, promtool, pint and Kyverno)" in flat


def test_plan_md_is_named_only_where_it_is_written(workdir: Path) -> None:
    written = run_cli("compile", "--no-validate")
    assert "(see out/inference-system/inference-engine/PLAN.md)" in written.out
    streamed = run_cli("compile", "--stdout", "--no-validate")
    assert streamed.code == 0
    assert "PLAN.md" not in streamed.err


def test_json_errors_carry_ok_exit_code_and_error(tmp_path: Path) -> None:
    bad = tmp_path / "spec.yaml"
    bad.write_text("apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\nmetadata: {name: A}\n")
    result = run_cli("compile", str(bad), "--out", str(tmp_path / "out"), "--format", "json")
    doc = json.loads(result.out)
    assert (doc["ok"], doc["exitCode"]) == (False, 2)
    assert "metadata.name: 'A' is not a valid Kubernetes name" in doc["error"]
    fine = run_cli("plan", str(REPO / "specs"), "--format", "json")
    assert json.loads(fine.out)["exitCode"] == 0


def _applied(out: Path, directory: Path | None = None) -> list[str]:
    """What a written out/ applies: every document its kustomization.yaml files reach."""
    here = directory or out
    docs: list[str] = []
    for entry in yaml.safe_load((here / "kustomization.yaml").read_text())["resources"]:
        path = here / entry
        if path.is_dir():
            docs += _applied(out, path)
        else:
            docs.append(path.read_text().split("\n", 1)[1])  # without the header
    return docs


@pytest.mark.parametrize("part", ["all", "spec", "cluster"])
def test_stdout_prints_what_the_written_tree_applies(workdir: Path, part: str) -> None:
    assert run_cli("compile", "--no-validate").code == 0
    streamed = run_cli("compile", "--stdout", "--no-validate", "--part", part)
    assert streamed.code == 0, streamed.err
    printed = [d for d in streamed.out.split("---\n") if d]
    crd = [d for d in _applied(workdir / "out") if "\nkind: CustomResourceDefinition\n" in d]
    expect = {
        "all": _applied(workdir / "out"),
        "cluster": crd,
        "spec": [d for d in _applied(workdir / "out") if d not in crd],
    }[part]
    assert crd and len(expect) >= 1
    assert sorted(printed) == sorted(expect)
    kinds = [yaml.safe_load(d)["kind"] for d in printed]  # in the order printed
    # apply order: the CRDs first, then namespaced objects by the kinds table
    assert kinds == sorted(kinds, key=table.rank)
