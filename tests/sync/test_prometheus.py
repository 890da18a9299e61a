"""The weight alerts on a real Prometheus server scraping a real Pushgateway, the way a
ServiceMonitor with ``honorLabels: true`` does, with the compiled rules loaded, after the
compiled weight-sync Jobs pushed; the alert states come from Prometheus' API.

Time runs SCALE times faster than on a cluster: every duration of the compiled rule group
(scrape and evaluation interval, ``for``, range windows) is divided by SCALE, and the
weight-report CronJob's wait with it. The expressions are otherwise the compiled ones.

The Pushgateway then restarts without persistence (its chart's default). With the
weight-report CronJob pushing again within its schedule, nothing pages and
StandbyWeightsBehind keeps firing as the same alert. Without it, every synced tier is
reported missing, as the generated cases say.
"""

from __future__ import annotations

import re
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from compiler.plan import REPORT_MARGIN_MS
from tests.servers import (
    Prometheus,
    Pushgateway,
    ServerMissing,
    start_prometheus,
    start_pushgateway,
)
from tests.sync.conftest import Nginx, job_command, publish, report_command, with_arg

SCALE = 120  # 30 s of the cluster's time is 250 ms here
SCRAPE_MS = 30_000  # the spec's alerts.scrapeInterval (the default)
RULES = "inference-system/inference-engine/prometheusrule-inference-engine-failover.yaml"
SPEC = {"namespace": "inference-system", "standbyc_spec": "inference-engine"}
_DURATION = re.compile(r"(\d+)(ms|s|m|h)")
_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000}


def _ms(text: str) -> int:
    return sum(int(n) * _MS[unit] for n, unit in _DURATION.findall(text))


def _scaled(text: str) -> str:
    return f"{max(1, _ms(text) // SCALE)}ms"


def _scaled_rules(compiled: Path) -> tuple[dict[str, Any], int]:
    """The compiled rule group with its durations divided by SCALE, and the bridge (the
    range window of the weight alerts) in real milliseconds."""
    group = yaml.safe_load((compiled / RULES).read_text())["spec"]["groups"][0]
    group["interval"] = _scaled(group["interval"])
    windows = re.compile(r"\[(\w+)\]")
    bridge = 0
    for rule in group["rules"]:
        for key in ("for", "keep_firing_for"):
            if key in rule:
                rule[key] = _scaled(rule[key])
        if "standbyc_weights" in rule["expr"]:
            bridge = max(bridge, *(_ms(w) for w in windows.findall(rule["expr"])))
        rule["expr"] = windows.sub(lambda m: f"[{_scaled(m.group(1))}]", rule["expr"])
        for name, text in rule.get("annotations", {}).items():
            rule["annotations"][name] = windows.sub(lambda m: f"[{_scaled(m.group(1))}]", text)
    assert bridge, "no weight alert has a range window"
    return {"groups": [group]}, bridge // SCALE


@pytest.fixture
def prometheus_for(tmp_path: Path) -> Iterator[Callable[[Pushgateway, dict[str, Any]], Prometheus]]:
    started: list[Prometheus] = []

    def start(pushgateway: Pushgateway, rules: dict[str, Any]) -> Prometheus:
        (tmp_path / "prometheus").mkdir()
        (tmp_path / "prometheus/rules.yaml").write_text(yaml.safe_dump(rules))
        interval = f"{SCRAPE_MS // SCALE}ms"
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": ["rules.yaml"],
            "scrape_configs": [
                {
                    # What a ServiceMonitor with honorLabels: true generates.
                    "job_name": "serviceMonitor/monitoring/prometheus-pushgateway/0",
                    "honor_labels": True,
                    "static_configs": [{"targets": [f"127.0.0.1:{pushgateway.port}"]}],
                }
            ],
        }
        try:
            server = start_prometheus(tmp_path / "prometheus", config)
        except ServerMissing as exc:
            pytest.fail(str(exc))
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()


def _states(prometheus: Prometheus) -> dict[tuple[str, str], dict[str, Any]]:
    """(alertname, tier) -> the alert, for this spec's weight alerts."""
    return {
        (a["labels"]["alertname"], a["labels"].get("tier", "")): a
        for a in prometheus.alerts()
        if a["labels"].get("standbyc_spec") == "inference-engine"
        and a["labels"]["alertname"].startswith("StandbyWeights")
    }


def _firing(states: dict[tuple[str, str], dict[str, Any]]) -> set[tuple[str, str]]:
    return {key for key, alert in states.items() if alert["state"] == "firing"}


def _wait_for(
    prometheus: Prometheus, want: set[tuple[str, str]], timeout: float
) -> dict[tuple[str, str], dict[str, Any]]:
    deadline = time.monotonic() + timeout
    states = _states(prometheus)
    while _firing(states) != want and time.monotonic() < deadline:
        time.sleep(0.1)
        states = _states(prometheus)
    assert _firing(states) == want, states
    return states


@pytest.fixture
def synced(
    nginx: Nginx, pushgateway: Pushgateway, generations: dict[int, Path], compiled: Path,
    tmp_path: Path,
) -> Path:  # fmt: skip
    """The compiled Jobs ran: hot holds 42 (the spec's generation), warm 41, and both
    pushed; cold's Job never ran. Returns the weights claim."""
    publish(generations[1], nginx.root, 41)
    publish(generations[2], nginx.root, 42)
    weights = tmp_path / "weights"

    def command(tier: str) -> list[str]:
        return job_command(compiled, tier, source=nginx.url, weights=weights,
                           pushgateway=pushgateway.url)  # fmt: skip

    assert subprocess.run(command("hot"), capture_output=True, check=False).returncode == 0
    to_41 = with_arg(command("warm"), "--generation", "41")
    assert subprocess.run(to_41, capture_output=True, check=False).returncode == 0
    return weights


def test_a_pushgateway_restart_pages_only_when_nothing_pushes_again(
    synced: Path, pushgateway: Pushgateway, compiled: Path,
    prometheus_for: Callable[[Pushgateway, dict[str, Any]], Prometheus], tmp_path: Path,
) -> None:  # fmt: skip
    weights = synced
    rules, bridge_ms = _scaled_rules(compiled)
    prometheus = prometheus_for(pushgateway, rules)
    behind, unreported = "StandbyWeightsBehind", "StandbyWeightsUnreported"
    # Unreported fires for cold once the bridge and its `for` have passed (about 23 s).
    states = _wait_for(prometheus, {(behind, "warm"), (unreported, "cold")}, timeout=60)
    description = states[(behind, "warm")]["annotations"]["description"]
    assert "held weights generation 41, below 42," in description, description
    # honor_labels: the pushed job and namespace survive the scrape, as the rules select.
    pushed = prometheus.api("query", query="standbyc_weights_generation")["result"]
    assert sorted((s["metric"]["tier"], s["value"][1]) for s in pushed) == [
        ("hot", "42"), ("warm", "41")
    ]  # fmt: skip
    assert all(
        {k: s["metric"][k] for k in ("job", "namespace", "standbyc_spec")}
        == {"job": "standbyc-weight-sync", **SPEC}
        for s in pushed
    )
    active_since = states[(behind, "warm")]["activeAt"]

    # The Pushgateway restarts (same address, nothing persisted); the weight-report
    # CronJob runs its longest wait later and pushes again. Watch until well past the
    # point where, without it, every tier would page.
    wait_s = (bridge_ms - REPORT_MARGIN_MS // SCALE) / 1000
    pushgateway.stop()
    restarted = start_pushgateway(tmp_path, pushgateway.port)
    try:
        restart = time.monotonic()
        reported = False
        rule = next(r for r in rules["groups"][0]["rules"] if r.get("alert") == unreported)
        watch_until = restart + (bridge_ms + _ms(rule["for"])) / 1000 + 5
        seen: list[dict[tuple[str, str], dict[str, Any]]] = []
        while time.monotonic() < watch_until:
            if not reported and time.monotonic() - restart >= wait_s:
                report = report_command(compiled, weights=weights, pushgateway=restarted.url)
                proc = subprocess.run(report, capture_output=True, text=True, check=False)
                assert proc.returncode == 0, proc.stdout + proc.stderr
                reported = True
            seen.append(_states(prometheus))
            time.sleep(0.1)
        assert reported
        for states in seen:
            assert set(states) == {(behind, "warm"), (unreported, "cold")}, states
            assert states[(behind, "warm")]["state"] == "firing", states
            assert states[(behind, "warm")]["activeAt"] == active_since, states

        # Restarted again, and nothing pushes again: once the bridge and `for` have
        # passed, every synced tier is reported missing, and Behind has ended.
        restarted.stop()
        restarted = start_pushgateway(tmp_path, pushgateway.port)
        _wait_for(
            prometheus,
            {(unreported, "cold"), (unreported, "hot"), (unreported, "warm")},
            timeout=60,
        )
    finally:
        restarted.stop()
