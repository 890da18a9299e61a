"""The generation a tier holds reaches the alerts: the compiled Jobs push it to the real
Pushgateway, and the compiled rule, fed the exact series the Pushgateway exposes, fires
for a tier behind and for a tier that never reported, and for nothing else."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from compiler import tools, yamlio
from tests.sync.conftest import Nginx, Pushgateway, job_command, publish, with_arg

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
