"""How long the weight alerts bridge a Pushgateway restart: the longest wait between two
runs of the weight-report CronJob's schedule, plus a margin; a schedule standbyc cannot
read that way is named in a warning."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler.plan import DEFAULT_BRIDGE_MS, REPORT_MARGIN_MS, report_bridge_ms
from compiler.spec import cron_longest_gap
from tests.conftest import run_cli


@pytest.mark.parametrize(
    ("schedule", "minutes"),
    [
        ("*/10 * * * *", 10),
        ("* * * * *", 1),
        ("0 * * * *", 60),
        ("5,35 * * * *", 30),
        ("0,10,50 * * * *", 40),
        ("15-20/5 * * * *", 55),
        ("0 */6 * * *", 360),
        ("30 2 * * *", 1440),
        ("*/15 8-17 * * 1-5", 62 * 60 + 15),  # Friday 17:45 to Monday 08:00
        ("0 0 * * 0", 7 * 1440),
        ("0 0 * * 7", 7 * 1440),  # Sunday either way
        ("0 12 * * MON,THU", 4 * 1440),
        ("@hourly", 60),
        ("@daily", 1440),
        ("0 0 1 * *", None),
        ("0 0 * 6 *", None),
        ("@monthly", None),
    ],
)
def test_the_longest_wait_of_a_schedule(schedule: str, minutes: int | None) -> None:
    assert cron_longest_gap(schedule) == minutes


def test_the_bridge_is_the_longest_wait_plus_a_margin() -> None:
    assert report_bridge_ms("*/10 * * * *") == 15 * 60_000 == DEFAULT_BRIDGE_MS
    assert report_bridge_ms("0 * * * *") == 60 * 60_000 + REPORT_MARGIN_MS
    assert report_bridge_ms(None) == DEFAULT_BRIDGE_MS
    assert report_bridge_ms("0 0 1 * *") == DEFAULT_BRIDGE_MS


def test_a_schedule_days_apart_is_named_in_a_warning(tmp_path: Path) -> None:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\nmetadata: {name: e, namespace: n}\n"
        "spec:\n  weightSync:\n    report: {schedule: '0 0 1 * *'}\n"
    )
    result = run_cli("compile", str(spec), "--out", str(tmp_path / "out"), "--no-validate")
    assert result.code == 0, result.err
    # The spec has no verify, size, link or outUrl: warned too, after this one.
    unset = ("spec.weightSync.verify is not set", " is not set: the seed's ", "outUrl is not set")
    assert [line for line in result.err.splitlines() if not any(u in line for u in unset)] == [
        f"standbyc: warning: {spec}:6:24: spec.weightSync.report.schedule: "
        "weightSync.report.schedule '0 0 1 * *' runs days apart: after a Pushgateway restart "
        "the weight alerts keep the last pushed values for 15m only, then "
        "StandbyWeightsUnreported pages until the next report"
    ]
    rules = (tmp_path / "out/n/e/prometheusrule-e-failover.yaml").read_text()
    assert "last_over_time(standbyc_weights_generation{" in rules and "[15m])" in rules
