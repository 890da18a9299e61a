"""`standbyc plan --from-prometheus` against a real Prometheus, holding series shaped as the
cluster exports them: cAdvisor's transmit counter per pod sandbox (``container=""``,
``interface``), kube-state-metrics' ``kube_pod_labels`` with the allowlisted labels, and the
weight-sync Jobs' pushes as Prometheus scrapes them from the Pushgateway with
``honor_labels: true`` (``job``, ``instance=""``, the report labels and ``tier``). Backfilled
with ``promtool tsdb create-blocks-from openmetrics``.

The serving pod sends 12 Gbit/s, 24 Gbit/s for 20 minutes in every two hours; a hot standby
sends 90 Gbit/s for a while (a weight sync, say) and must not count as serving traffic. The
p95 is 24 Gbit/s: over the hot tier's 20 Gbit/s cap the default assumed, so the measured plan
misses where the declared one met."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from compiler import names
from tests.conftest import run_cli
from tests.servers import Prometheus, ServerMissing, free_port, start_backfilled

HOUR_S = 3600
STEP_S = 60
SPAN_S = 8 * HOUR_S
NS, NAME = "ml", "measured"
SPEC = f"""apiVersion: standbyc.dev/v1alpha1
kind: StandbySpec
metadata: {{name: {NAME}, namespace: {NS}}}
spec:
  engine: {{selector: {{app: engine}}, reload: {{api: sglang}}}}
  tiers:
    hot: {{replicas: 2, egress: 20Gbit/s}}
  weightSync:
    tiers: [hot]
    report: {{pushgateway: "http://pushgateway.monitoring.svc:9091"}}
  failover: {{rto: 2m, failedReplicas: 2}}
"""


def _counter(rates: list[float]) -> list[float]:
    total, out = 1e12, []
    for r in rates:
        total += r * STEP_S
        out.append(total)
    return out


def openmetrics(end: float) -> str:
    """Eight hours of samples, one a minute, ending at ``end``."""
    steps = SPAN_S // STEP_S
    t0 = end - SPAN_S
    serving = [(3e9 if (i % 120) >= 100 else 1.5e9) for i in range(steps)]  # bytes/s
    standby = [(11.25e9 if 200 <= i < 260 else 0.1e9) for i in range(steps)]
    rows: dict[str, list[float]] = {
        f'container_network_transmit_bytes_total{{container="",interface="eth0",'
        f'namespace="{NS}",pod="engine-0"}}': _counter(serving),
        f'container_network_transmit_bytes_total{{container="",interface="eth0",'
        f'namespace="{NS}",pod="engine-hot-0"}}': _counter(standby),
        f'kube_pod_labels{{label_app="engine",namespace="{NS}",pod="engine-0"}}': [1] * steps,
        f'kube_pod_labels{{label_app="engine",label_tier="hot",namespace="{NS}",'
        f'pod="engine-hot-0"}}': [1] * steps,
    }
    pushed = (
        f'instance="",job="{names.SYNC_JOB}",namespace="{NS}",standbyc_spec="{NAME}",tier="hot"'
    )
    # A reload every 30 minutes: 40 s, and 90 s for one in ten.
    reloads = [90.0 if (i // 30) % 10 == 9 else 40.0 for i in range(steps)]
    rows[f"{names.RELOAD_SECONDS_METRIC}{{{pushed}}}"] = reloads
    rows[f"{names.SYNC_SECONDS_METRIC}{{{pushed}}}"] = [12.0] * steps
    lines = []
    for series, values in sorted(rows.items()):
        lines += [f"{series} {v!r} {t0 + i * STEP_S:.3f}" for i, v in enumerate(values)]
    return "\n".join([*lines, "# EOF"]) + "\n"


@pytest.fixture
def prometheus(tmp_path: Path) -> Iterator[Prometheus]:
    end = (time.time() // HOUR_S - 1) * HOUR_S  # an hour ago: no retention, no head overlap
    try:
        server = start_backfilled(tmp_path / "prometheus", openmetrics(end))
    except ServerMissing as exc:
        pytest.fail(str(exc))
    yield server
    server.stop()


def _spec(tmp_path: Path, text: str = SPEC) -> Path:
    path = tmp_path / f"{NAME}.yaml"
    path.write_text(text)
    return path


def _plan(*args: str) -> tuple[int, dict[str, object]]:
    result = run_cli("plan", *args, "--format", "json")
    return result.code, json.loads(result.out)


def test_measured_numbers_replace_the_defaults_and_flip_the_verdict(
    tmp_path: Path, prometheus: Prometheus
) -> None:
    spec = _spec(tmp_path)
    code, declared = _plan(str(spec))
    assert code == 0
    (before,) = declared["specs"]  # type: ignore[misc]
    assert before["failover"]["met"] is True  # 2 x 20 Gbit/s (the cap, by default) on 2 pods

    url = f"http://127.0.0.1:{prometheus.port}"
    code, measured = _plan(str(spec), "--from-prometheus", url, "--window", "1d")
    assert code == 0
    (after,) = measured["specs"]  # type: ignore[misc]
    inputs = {row["name"]: row for row in after["inputs"]}
    egress = inputs["serving egress of one failed pod"]
    assert egress["source"] == "measured"
    # The serving pod's p95: 24 Gbit/s; the hot standby's 90 Gbit/s is not serving traffic.
    assert egress["value"] == pytest.approx(24e9, rel=0.02)
    reload = inputs["tier hot: its engines' reload"]
    assert reload["source"] == "measured" and reload["value"] == pytest.approx(90.0)
    assert inputs["tier hot: its sync"]["value"] == pytest.approx(12.0)
    # Two failed pods' 24 Gbit/s each on two hot pods: over their 20 Gbit/s cap.
    assert after["failover"]["met"] is False
    assert after["failover"]["verdict"].startswith(
        "objective missed: each hot pod sends 24 Gbit/s, over its 20 Gbit/s cap"
    )
    assert after["measured"] == {
        "missing": [],
        "spec": ["failover.servingEgress: 24Gbit/s", "failover.reload: 90s"],
    }
    # The rollout's reloads are the measured ones.
    (hot,) = after["failover"]["rollout"]
    reloads = next(s for s in hot["steps"] if s["name"] == "reloads")
    assert "2 wave(s) of 1 pod(s) x 90.00 s (measured: p95 over 1d of" in reloads["how"]

    text = run_cli("plan", str(spec), "--from-prometheus", url, "--window", "1d")
    assert text.code == 0
    assert "| serving egress of one failed pod | 24 Gbit/s | measured: p95 over 1d" in text.out
    assert "- to keep what was measured, write in the spec: failover.servingEgress" in text.out
    # Nothing measured reaches out/: compile still reads the spec alone.
    compiled = run_cli("compile", str(spec), "--out", str(tmp_path / "out"), "--no-validate")
    assert compiled.code == 0
    written = (tmp_path / "out" / NS / NAME / "PLAN.md").read_text()
    assert "(measured: " not in written and "objective met" in written


def test_no_data_keeps_the_plans_number_and_says_so(tmp_path: Path, prometheus: Prometheus) -> None:
    other = SPEC.replace(f"namespace: {NS}", "namespace: elsewhere")
    spec = _spec(tmp_path, other)
    url = f"http://127.0.0.1:{prometheus.port}"
    code, doc = _plan(str(spec), "--from-prometheus", url, "--window", "1d")
    assert code == 0
    (one,) = doc["specs"]  # type: ignore[misc]
    inputs = {row["name"]: row for row in one["inputs"]}
    assert inputs["serving egress of one failed pod"]["source"] == "default"
    assert one["measured"]["missing"] == [
        "the serving pods' egress (no cAdvisor or kube-state-metrics series)",
        f"tier hot: no {names.RELOAD_SECONDS_METRIC}",
        f"tier hot: no {names.SYNC_SECONDS_METRIC}",
    ]


def test_a_prometheus_that_cannot_answer_is_an_error(tmp_path: Path) -> None:
    spec = _spec(tmp_path)
    url = f"http://127.0.0.1:{free_port()}"
    result = run_cli("plan", str(spec), "--from-prometheus", url)
    assert result.code == 2
    assert f"standbyc: --from-prometheus {url}: cannot query it" in result.err
    assert result.out == ""
