"""Every query of the compiled dashboard, run through a real Prometheus' HTTP API with the
dashboard's variables substituted: each returns data, every series carries the labels its
legend names, and a dashed line equals its alert's threshold in the compiled rules.

Two sources of data, both what real exporters emit:

- the input series of every generated promtool case of the spec (the kubelet's cAdvisor
  and kube-state-metrics as kube-prometheus-stack scrapes them, the pushed generations and
  the recorded wanted generation), backfilled into the server's TSDB with
  ``promtool tsdb create-blocks-from openmetrics``, each case in its own stretch of time;
- the compiled weight-sync Jobs themselves: the hot Job syncs and has a real engine pod
  (tests/sync/engine.py) load the new generation, the warm Job syncs an older one, both push
  to the real Pushgateway, which Prometheus scrapes with the compiled rules loaded, so the
  sync and reload numbers, the recorded generation and the alerts (``ALERTS``) are real.

A query that names a metric or a label no exporter emits returns nothing and fails; two
such typos are made on purpose below and must be caught.
"""

from __future__ import annotations

import json
import math
import re
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from compiler import names
from tests.conftest import CASES, OUT
from tests.servers import Prometheus, Pushgateway, ServerMissing, free_port, start_backfilled
from tests.sync.conftest import Nginx, job_command, with_arg
from tests.sync.reload.conftest import (  # noqa: F401 - hf, pods, seeds: fixtures
    ADDRESSES,
    Seeds,
    compiled_tier,
    hf,
    pods,
    seeds,
)
from tests.sync.test_prometheus import _scaled_rules, prometheus_for  # noqa: F401 - fixture

# The committed trees (tests/test_golden.py holds them to what their specs compile to): the
# example specs, a spec whose scrape and evaluation intervals differ, and one without a cold
# tier and without a Pushgateway.
TREES = [
    OUT / "inference-system/inference-engine",
    OUT / "llm-serving/llm-grpc",
    CASES / "off-grid-intervals/expected/inference-system/off-grid",
    CASES / "grafana-operator/expected/serving/observed",
]
PUSHED = (names.SYNC_BYTES_METRIC, names.SYNC_SECONDS_METRIC, names.RELOAD_SECONDS_METRIC)
LEGEND_LABEL = re.compile(r"\{\{\s*(\w+)\s*\}\}")
DASHED = re.compile(r"The dashed line is (\w+)'s (threshold|for)")
NUMBER = re.compile(r"(?<![=!<>])[<>] ([0-9][0-9.e+]*)\b")
HOUR_S = 3600


@dataclass(frozen=True)
class Probe:
    panel: str
    ref: str
    expr: str  # with the dashboard's variables substituted
    legend: str

    @property
    def labels(self) -> list[str]:
        return LEGEND_LABEL.findall(self.legend)


def _board(directory: Path, name: str) -> dict[str, Any]:
    cm = yaml.safe_load((directory / f"configmap-{name}-dashboard.yaml").read_text())
    (text,) = cm["data"].values()
    board: dict[str, Any] = json.loads(text)
    return board


def _substitute(expr: str, namespace: str) -> str:
    return expr.replace("$namespace", namespace).replace("${namespace}", namespace)


def probes(board: dict[str, Any], namespace: str) -> list[Probe]:
    """Every panel's every query, and the annotation's, with the variables substituted."""
    out = [
        Probe(p["title"], t["refId"], _substitute(t["expr"], namespace), t["legendFormat"])
        for p in board["panels"]
        for t in p.get("targets", [])
    ]
    out += [
        Probe(f"annotation {a['name']}", "-", _substitute(a["expr"], namespace), "{{alertname}}")
        for a in board["annotations"]["list"]
    ]
    return out


def prove(prometheus: Prometheus, probe: Probe, start: float, end: float, step: int) -> list[str]:
    """What is wrong with ``probe`` on this server's data (empty: it holds)."""
    data = prometheus.api(
        "query_range", query=probe.expr, start=str(start), end=str(end), step=f"{step}s"
    )
    series = data["result"]
    if not series:
        return [f"{probe.panel} {probe.ref}: no data for {probe.expr}"]
    return [
        f"{probe.panel} {probe.ref}: a series lacks {label!r}, which its legend "
        f"{probe.legend!r} names: {s['metric']}"
        for s in series
        for label in probe.labels
        if not s["metric"].get(label)
    ]


# --- the generated promtool cases, backfilled -------------------------------------------------

_NUM = r"-?[0-9.]+(?:e[-+]?[0-9]+)?"
_TOKEN = re.compile(rf"^(_|stale|{_NUM})(?:([-+])({_NUM}))?(?:x(\d+))?$")


def expand(values: str) -> list[float | None]:
    """promtool's series notation, one entry per scrape (None: no sample): ``a+bxn`` is
    n+1 samples from a by b, ``axn`` a n+1 times, ``_xn`` n missing, ``stale`` a staleness
    marker (here, no sample)."""
    out: list[float | None] = []
    for token in values.split():
        m = _TOKEN.match(token)
        assert m, token
        head, sign, step, times = m.groups()
        if head in ("_", "stale"):
            out += [None] * (int(times) if times else 1)
            continue
        delta = float(step) * (-1 if sign == "-" else 1) if step else 0.0
        out += [float(head) + i * delta for i in range(int(times) + 1 if times else 1)]
    return out


def _series_key(series: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    name, _, rest = series.partition("{")
    labels = tuple(sorted(re.findall(r'(\w+)=~?"((?:[^"\\]|\\.)*)"', rest)))
    return name.strip(), labels


def backfill_text(cases: list[dict[str, Any]], t0: float, gap: float) -> str:
    """OpenMetrics text of every case's input series, case k from ``t0 + k * gap``."""
    samples: dict[tuple[str, tuple[tuple[str, str], ...]], list[tuple[float, float]]] = {}
    for k, case in enumerate(cases):
        interval = _seconds(case["interval"])
        for s in case.get("input_series", []):
            rows = samples.setdefault(_series_key(s["series"]), [])
            for i, v in enumerate(expand(s["values"])):
                if v is not None:
                    rows.append((t0 + k * gap + i * interval, v))
    lines = []
    for (name, labels), rows in sorted(samples.items()):
        text = ",".join(f'{k}="{v}"' for k, v in labels)
        lines += [f"{name}{{{text}}} {v!r} {t:.3f}" for t, v in sorted(rows)]
    return "\n".join([*lines, "# EOF"]) + "\n"


def _seconds(duration: str) -> float:
    units = {"ms": 0.001, "s": 1, "m": 60, "h": 3600}
    return sum(float(n) * units[u] for n, u in re.findall(r"(\d+)(ms|s|m|h)", duration))


def _cases(directory: Path) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for path in sorted((directory / "tests").glob("*.test.yaml")):
        out += yaml.safe_load(path.read_text())["tests"]
    return out


@pytest.fixture
def backfilled(tmp_path: Path) -> Iterator[Callable[[Path], tuple[Prometheus, float, float]]]:
    started: list[Prometheus] = []

    def start(directory: Path) -> tuple[Prometheus, float, float]:
        cases = _cases(directory)
        spec = directory.name
        longest = max(len(expand(s["values"])) * _seconds(c["interval"])
                      for c in cases for s in c.get("input_series", []))  # fmt: skip
        gap = math.ceil(longest / HOUR_S + 1) * HOUR_S  # cases never meet, nor their windows
        # Recent, so that no retention rule ever applies to the blocks.
        t0 = (time.time() // HOUR_S - 24 - len(cases) * gap // HOUR_S) * HOUR_S
        server_dir = tmp_path / f"prometheus-{spec}"
        try:
            server = start_backfilled(server_dir, backfill_text(cases, t0, gap))
        except ServerMissing as exc:
            pytest.fail(str(exc))
        started.append(server)
        return server, t0, t0 + len(cases) * gap

    yield start
    for server in started:
        server.stop()


def _rule_numbers(directory: Path, name: str) -> dict[str, tuple[float, float]]:
    """alert -> (the number it compares with, its ``for`` in seconds), from the compiled
    PrometheusRule; an alert with a branch per tier as ``<alert>/<tier>`` for each."""
    obj = yaml.safe_load((directory / f"prometheusrule-{name}-failover.yaml").read_text())
    out = {}
    for rule in obj["spec"]["groups"][0]["rules"]:
        if "alert" not in rule:
            continue
        code = "\n".join(line for line in rule["expr"].splitlines() if not line.startswith("#"))
        for_s = _seconds(rule["for"])
        found = NUMBER.findall(code)
        out[rule["alert"]] = (float(found[0]) if len(found) == 1 else math.nan, for_s)
        for branch in code.split("\nor\n") if "\nor\n" in code else ():
            tier, numbers = re.search(r'="(hot|warm|cold)"\}', branch), NUMBER.findall(branch)
            if tier is not None and len(numbers) == 1:
                out[f"{rule['alert']}/{tier.group(1)}"] = (float(numbers[0]), for_s)
    return out


def _step(start: float, end: float) -> int:
    """A step that keeps a range query within Prometheus' 11,000 points."""
    return max(30, math.ceil((end - start) / 10_000 / 30) * 30)


@pytest.mark.parametrize("directory", TREES, ids=lambda d: d.name)
def test_every_panel_query_returns_the_series_the_generated_cases_use(
    directory: Path, backfilled: Callable[[Path], tuple[Prometheus, float, float]]
) -> None:
    spec, namespace = directory.name, directory.parent.name
    board = _board(directory, spec)
    prometheus, start, end = backfilled(directory)
    step = _step(start, end)
    every = probes(board, namespace)
    # Pushed only by the Jobs themselves, and the alerts only by a Prometheus evaluating the
    # rules: test_the_weight_panels_and_alerts_read_what_the_jobs_push proves those.
    here = [p for p in every if not any(m in p.expr for m in PUSHED) and "ALERTS" not in p.expr]
    assert len(here) >= len(every) - 4
    found = [problem for p in here for problem in prove(prometheus, p, start, end, step)]
    assert found == []

    # The namespace variable offers the spec's namespace (and the one the cases' foreign
    # pods run in).
    (variable,) = [v for v in board["templating"]["list"] if v["name"] == "namespace"]
    match = re.fullmatch(r"label_values\((.+), namespace\)", variable["query"])
    assert match, variable["query"]
    values = prometheus.api("label/namespace/values", **{"match[]": match.group(1),
                            "start": str(start), "end": str(end)})  # fmt: skip
    assert namespace in values, values

    # Broken on purpose: a label typo in the selector, a label the legend names that the
    # series lack. Both are caught.
    egress = next(p for p in here if p.legend == "{{pod}}")
    broken = egress.expr.replace("kube_pod_labels{namespace=", "kube_pod_labels{namespce=")
    typo = Probe(egress.panel, egress.ref, broken, egress.legend)
    assert prove(prometheus, typo, start, end, step) == [
        f"{typo.panel} {typo.ref}: no data for {typo.expr}"
    ]
    legend = Probe(egress.panel, egress.ref, egress.expr, "{{pood}}")
    assert prove(prometheus, legend, start, end, step)[0].startswith(
        f"{egress.panel} {egress.ref}: a series lacks 'pood'"
    )

    # Each dashed line is its alert's threshold (or for) in the compiled rule.
    rules = _rule_numbers(directory, spec)
    checked = []
    for panel in (p for p in board["panels"] if p["type"] == "timeseries"):
        steps = panel["fieldConfig"]["defaults"]["thresholds"]["steps"]
        dashed = DASHED.search(panel["description"])
        if dashed is None:
            assert len(steps) == 1, panel["title"]  # no line drawn
            continue
        alert, what = dashed.groups()
        tier = panel["title"].partition(":")[0]
        threshold, for_s = rules.get(f"{alert}/{tier}", rules[alert])
        assert [s["value"] for s in steps] == [None, threshold if what == "threshold" else for_s]
        checked.append(alert)
    assert {"InferenceBandwidthHigh", "FailoverBandwidthSpike", "HotTierBelowReplicas"} <= set(
        checked
    )


def test_the_weight_panels_and_alerts_read_what_the_jobs_push(
    *, seeds: Seeds, nginx: Nginx, pushgateway: Pushgateway, compiled: Path,  # noqa: F811
    tmp_path: Path, pods: Any,  # noqa: F811
    prometheus_for: Callable[[Pushgateway, dict[str, Any]], Prometheus],  # noqa: F811
) -> None:  # fmt: skip
    """hot: its Job syncs generation 42 and its engine pod loads it; warm: its Job syncs
    41 (behind), with no pod ready to ask. The Pushgateway holds what they pushed;
    Prometheus scrapes it with the compiled rules loaded (durations divided by 120), so
    StandbyWeightsBehind fires."""
    port = free_port()
    pod = ADDRESSES[0]
    spec_dir = "inference-system/inference-engine"
    tier = compiled_tier(compiled, spec_dir, "hot", seeds, nginx, tmp_path, port=port,
                         addresses=(pod,), pushgateway=pushgateway.url)  # fmt: skip
    tier.cmd = with_arg(tier.cmd, "--expect-pods", "1")  # the one pod started here
    pods("sglang", port, tier.target, {pod: []})
    code, doc, output = tier.run()
    assert code == 0 and doc["reload"]["pods"], output
    warm = job_command(compiled, "warm", source=nginx.url, weights=tier.weights,
                       pushgateway=pushgateway.url)  # fmt: skip
    # No warm pod is ready to ask (the Service's name resolves to nothing here): the Job
    # reports the generation on disk and what the tier last confirmed serving.
    proc = subprocess.run(with_arg(warm, "--generation", "41"), capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr

    rules, _ = _scaled_rules(compiled)
    prometheus = prometheus_for(pushgateway, rules)
    directory = compiled / "inference-system/inference-engine"
    every = probes(_board(directory, "inference-engine"), "inference-system")
    weights = [p for p in every if "standbyc" in p.expr or "ALERTS" in p.expr]
    assert len(weights) == 12, [p.expr for p in weights]
    deadline = time.monotonic() + 60
    while True:
        now = time.time()
        found = [x for p in weights for x in prove(prometheus, p, now - 120, now, 1)]
        # The cold tier never synced: its weights panel shows only what is wanted.
        found = [x for x in found if not x.startswith("cold: weights generation B")]
        if not found or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert found == []
    pushed = prometheus.api("query", query=f"{names.RELOAD_SECONDS_METRIC}")["result"]
    assert [s["metric"]["tier"] for s in pushed] == ["hot"]
