"""The generation a tier holds reaches the alerts: the compiled Jobs push it to the real
Pushgateway, and the compiled rule, fed the exact series the Pushgateway exposes, fires
for a tier behind and for a tier that never reported, and for nothing else."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import Any

import yaml

from compiler import tools, yamlio
from compiler.commands.weights.run import JOB_UID
from compiler.weights.sync.standby import StandbyDir
from tests.servers import start_pushgateway
from tests.sync.conftest import (
    Nginx,
    Pushgateway,
    job_command,
    publish,
    report_command,
    tree_bytes,
    with_arg,
)

SPEC_DIR = "inference-system/inference-engine"
LINE = re.compile(r"^(standbyc_weights_generation\{[^}]*\}) (\S+)$", re.MULTILINE)


def _pushed_series(pushgateway: Pushgateway) -> dict[str, float]:
    return {m.group(1): float(m.group(2)) for m in LINE.finditer(pushgateway.metrics())}


def _labels(series: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', series))


# An annotation's query of what the rule group records: the spec's generation.
QUERIED = re.compile(r'\{\{ with printf ".*?"( \$labels\.\w+)+ \| query \}\}.*?\{\{ end \}\}')


def _expand(text: str, labels: dict[str, str], value: float, recorded: float | None) -> str:
    for key, val in labels.items():
        text = text.replace("{{ $labels." + key + " }}", val)
    if recorded is not None:
        text = QUERIED.sub(f"{recorded:g}", text)
    return text.replace("{{ $value }}", f"{value:g}")


def _expected(
    rule: dict[str, Any], labels: dict[str, str], value: float, recorded: float | None = None
) -> dict[str, Any]:
    full = {**labels, **rule["labels"]}
    annotations = rule["annotations"]
    return {
        "exp_labels": full,
        "exp_annotations": {k: _expand(v, full, value, recorded) for k, v in annotations.items()},
    }


def _promtool_test(
    compiled: Path, tmp_path: Path, series: dict[str, float], expect: dict[str, list[Any]]
) -> subprocess.CompletedProcess[str] | tools.Result:
    # The deployed rules, as promtool reads them (the groups of the PrometheusRule).
    rule_obj = yaml.safe_load(
        (compiled / SPEC_DIR / "prometheusrule-inference-engine-failover.yaml").read_text()
    )
    rules_file = tmp_path / "deployed.rules.yaml"
    rules_file.write_text(yamlio.dump({"groups": rule_obj["spec"]["groups"]}))
    doc = {
        "rule_files": [str(rules_file)],
        "evaluation_interval": "30s",
        "tests": [
            {
                "interval": "30s",
                "input_series": [
                    {"series": s, "values": f"{v:g}x130"} for s, v in sorted(series.items())
                ],
                "alert_rule_test": [
                    {"eval_time": "31m", "alertname": name, "exp_alerts": alerts}
                    for name, alerts in expect.items()
                ],
            }
        ],
    }
    path = tmp_path / "pushed.test.yaml"
    path.write_text(yamlio.dump(doc))
    return tools.run("promtool", ["test", "rules", str(path)], ok_codes=(0, 1))


def test_pushed_series_drive_the_compiled_alerts(
    nginx: Nginx, pushgateway: Pushgateway, generations: dict[int, Path], compiled: Path,
    tmp_path: Path,
) -> None:  # fmt: skip
    publish(generations[1], nginx.root, 41)
    publish(generations[2], nginx.root, 42)
    weights = tmp_path / "weights"

    def command(tier: str) -> list[str]:
        return job_command(
            compiled, tier, source=nginx.url, weights=weights, pushgateway=pushgateway.url
        )

    # hot: the compiled Job brings it to 42 and reports 42.
    assert subprocess.run(command("hot"), capture_output=True, check=False).returncode == 0
    # warm: holds 41; its Job then fails on a corrupted delta (exit 1) and reports 41.
    to_41 = with_arg(command("warm"), "--generation", "41")
    assert subprocess.run(to_41, capture_output=True, check=False).returncode == 0
    delta = nginx.root / "deltas/41-42.delta"
    delta.write_bytes(delta.read_bytes()[:-1] + b"\0")
    assert subprocess.run(command("warm"), capture_output=True, check=False).returncode == 1
    # cold: its Job never ran.

    series = _pushed_series(pushgateway)
    common = {"job": "standbyc-weight-sync", "namespace": "inference-system",
              "standbyc_spec": "inference-engine"}  # fmt: skip
    # Exactly what the Pushgateway exposes (instance="" is its own addition).
    assert series == {
        'standbyc_weights_generation{instance="",job="standbyc-weight-sync",'
        'namespace="inference-system",standbyc_spec="inference-engine",tier="hot"}': 42.0,
        'standbyc_weights_generation{instance="",job="standbyc-weight-sync",'
        'namespace="inference-system",standbyc_spec="inference-engine",tier="warm"}': 41.0,
    }
    assert all(_labels(s) == {**common, "instance": "", "tier": _labels(s)["tier"]} for s in series)

    rule_obj = yaml.safe_load(
        (compiled / SPEC_DIR / "prometheusrule-inference-engine-failover.yaml").read_text()
    )
    rules = {r.get("alert", r.get("record")): r for r in rule_obj["spec"]["groups"][0]["rules"]}
    behind, unreported = rules["StandbyWeightsBehind"], rules["StandbyWeightsUnreported"]
    expect = {
        "StandbyWeightsBehind": [
            _expected(behind, {"namespace": "inference-system", "tier": "warm"}, 41, 42)
        ],
        "StandbyWeightsUnreported": [_expected(unreported, {**common, "tier": "cold"}, 1)],
    }
    result = _promtool_test(compiled, tmp_path, series, expect)
    assert result.returncode == 0, result.stdout + result.stderr

    # Scraped without honor_labels, job and namespace arrive as exported_job and
    # exported_namespace: then the rules see nothing pushed, and every tier is unreported.
    renamed = {
        s.replace('job="', 'exported_job="').replace('namespace="', 'exported_namespace="'): v
        for s, v in series.items()
    }
    expect = {
        "StandbyWeightsBehind": [],
        "StandbyWeightsUnreported": [
            _expected(unreported, {**common, "tier": t}, 1) for t in ("cold", "hot", "warm")
        ],
    }
    result = _promtool_test(compiled, tmp_path, renamed, expect)
    assert result.returncode == 0, result.stdout + result.stderr


def test_an_unwritable_claim_is_bad_input_and_the_held_generation_is_still_pushed(
    nginx: Nginx, pushgateway: Pushgateway, generations: dict[int, Path], compiled: Path
) -> None:
    """The Job's user (uid/gid 65532) cannot write the claim, as on a ReadWriteMany volume
    that ignores fsGroup: exit 2 with who must own what, no traceback, nothing on disk
    changed, and the generation the tier still holds is pushed."""
    publish(generations[1], nginx.root, 41)
    publish(generations[2], nginx.root, 42)
    # The claim as root left it: readable by everyone, writable by root alone.
    weights = Path(tempfile.mkdtemp(prefix="standbyc-claim-")) / "weights"
    try:
        weights.parent.chmod(0o755)
        cmd = job_command(compiled, "cold", source=nginx.url, weights=weights,
                          pushgateway=pushgateway.url)  # fmt: skip
        root = subprocess.run(with_arg(cmd, "--generation", "41"), capture_output=True,
                              text=True, check=False)  # fmt: skip
        assert root.returncode == 0, root.stderr
        before = tree_bytes(weights)
        as_job = ["setpriv", "--reuid", str(JOB_UID), "--regid", str(JOB_UID), "--clear-groups"]
        proc = subprocess.run([*as_job, *cmd], capture_output=True, text=True, check=False)
        assert proc.returncode == 2, proc.stdout + proc.stderr
        assert "Traceback" not in proc.stderr and "bug" not in proc.stderr, proc.stderr
        doc = json.loads(proc.stdout)  # the Job's --format json
        assert (doc["ok"], doc["exitCode"], doc["held_generation"]) == (False, 2, 41), doc
        error = doc["error"]
        assert "permission denied" in error and "fsGroup" in error, error
        assert f"uid {JOB_UID}, gid {JOB_UID}" in error, error
        assert f"chown -R {JOB_UID}:{JOB_UID}" in error, error
        assert tree_bytes(weights) == before
        series = _pushed_series(pushgateway)
        assert [(_labels(s)["tier"], v) for s, v in series.items()] == [("cold", 41.0)]
    finally:
        shutil.rmtree(weights.parent)


def _standbyc_lines(pushgateway: Pushgateway) -> list[str]:
    return sorted(x for x in pushgateway.metrics().splitlines() if x.startswith("standbyc_"))


def test_the_report_cronjob_pushes_again_what_a_restarted_pushgateway_forgot(
    nginx: Nginx, pushgateway: Pushgateway, generations: dict[int, Path], compiled: Path,
    tmp_path: Path,
) -> None:  # fmt: skip
    """The Pushgateway restarts without persistence: every push is gone. The compiled
    weight-report CronJob's exact command pushes again, per tier, what its last sync
    pushed (held, served and failed pods, and what the update fetched and took, alike),
    skips a tier whose sync is running, and reports nothing for a tier that holds nothing."""
    publish(generations[1], nginx.root, 41)
    publish(generations[2], nginx.root, 42)
    weights = tmp_path / "weights"

    def command(tier: str, gateway: Pushgateway) -> list[str]:
        return job_command(compiled, tier, source=nginx.url, weights=weights,
                           pushgateway=gateway.url)  # fmt: skip

    assert (
        subprocess.run(command("hot", pushgateway), capture_output=True, check=False).returncode
        == 0
    )
    to_41 = with_arg(command("warm", pushgateway), "--generation", "41")
    assert subprocess.run(to_41, capture_output=True, check=False).returncode == 0
    pushed = _standbyc_lines(pushgateway)
    # hot and warm reload (no pod is ready to ask here): held, served and failed pods each,
    # and what their update fetched and took.
    assert len(pushed) == 10, pushed
    assert {_labels(x)["tier"] for x in pushed} == {"hot", "warm"}
    assert {x.split("{")[0] for x in pushed} == {
        "standbyc_weights_generation", "standbyc_weights_served_generation",
        "standbyc_weights_reload_failed_pods", "standbyc_weights_sync_bytes",
        "standbyc_weights_sync_duration_seconds",
    }  # fmt: skip

    pushgateway.proc.terminate()
    pushgateway.proc.wait(timeout=10)
    restarted = start_pushgateway(tmp_path)
    try:
        assert _standbyc_lines(restarted) == []
        report = report_command(compiled, weights=weights, pushgateway=restarted.url)
        proc = subprocess.run(report, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        doc = json.loads(proc.stdout)
        assert [(t["tier"], t["pushed"]) for t in doc["tiers"]] == [
            ("hot", True), ("warm", True), ("cold", False)
        ]  # fmt: skip
        assert "holds no generation" in doc["tiers"][2]["skipped"]
        assert _standbyc_lines(restarted) == pushed

        # A sync of hot is running (it holds the target's lock): hot is left to it.
        restarted.proc.terminate()
        restarted.proc.wait(timeout=10)
        restarted = start_pushgateway(tmp_path)
        report = report_command(compiled, weights=weights, pushgateway=restarted.url)
        with StandbyDir(weights / "hot/llama-7b").locked():
            proc = subprocess.run(report, capture_output=True, text=True, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        hot = json.loads(proc.stdout)["tiers"][0]
        assert (hot["pushed"], "sync of this tier is running" in hot["skipped"]) == (False, True)
        assert {_labels(x)["tier"] for x in _standbyc_lines(restarted)} == {"warm"}
    finally:
        restarted.proc.terminate()
        restarted.proc.wait(timeout=10)

    # The Pushgateway does not answer: exit 4, naming it.
    report = report_command(compiled, weights=weights, pushgateway=restarted.url)
    proc = subprocess.run(report, capture_output=True, text=True, check=False, timeout=120)
    assert proc.returncode == 4, proc.stdout + proc.stderr
    assert restarted.url in json.loads(proc.stdout)["error"]
