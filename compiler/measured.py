"""``standbyc plan --from-prometheus``: the plan's defaults replaced by what the cluster's
own exporters and the weight-sync Jobs' pushes report, each the p95 over a window:

- what one serving engine pod sends (cAdvisor's transmit counter, joined to
  kube-state-metrics' pod labels: the engine's pods outside the standby tiers): the traffic a
  takeover receives;
- what a tier's engines took to load a generation (standbyc_weights_reload_duration_seconds);
- what a tier's sync took, download, rebuild and verification together
  (standbyc_weights_sync_duration_seconds).

A measurement that finds no data leaves the plan's number as it was, and says so. Nothing
measured reaches out/: compile reads the spec alone, so out/ stays the same for the same
specs; write a measured value into the spec to keep it."""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field, replace
from typing import Any

from compiler import names, units
from compiler.alerts.base import Context, indent, selector
from compiler.errors import StandbycError
from compiler.failover import Inputs, Num
from compiler.plan import Plan

RATE_WINDOW = "5m"  # each sample's rate: four scrapes at the usual 1m at least
STEP = "1m"


class PrometheusUnavailable(StandbycError):
    """The Prometheus given cannot answer: the plan is not printed half measured."""


@dataclass(frozen=True)
class Measured:
    serving_egress: Num | None = None
    reload: dict[str, Num] = field(default_factory=dict)  # tier -> seconds
    sync: dict[str, Num] = field(default_factory=dict)  # tier -> seconds
    missing: tuple[str, ...] = ()  # what found no data, in words

    def spec_lines(self) -> list[str]:
        """How to keep what was measured: the spec's own fields."""
        out = []
        if self.serving_egress is not None:
            value = units.k8s_quantity(int(self.serving_egress.value))
            out.append(f"failover.servingEgress: {value}bit/s")
        reloads = {round(n.value) for n in self.reload.values()}
        if reloads:
            out.append(f"failover.reload: {max(reloads)}s")
        return out


def serving_egress_query(plan: Plan, window: str) -> str:
    """p95 over ``window`` of the busiest serving engine pod's egress, in bit/s."""
    ctx = Context(plan)
    standby = "|".join(t.name for t in plan.tiers) or "hot|warm|cold"
    matchers = {"namespace": plan.namespace, **plan.engine.ksm_selector}
    serving = selector(matchers)[:-1] + f', {plan.engine.ksm_tier}!~"{standby}"}}'
    busiest = (
        "max by (namespace) (\n"
        f"{indent(ctx.egress_bytes(units.parse_duration(RATE_WINDOW)))}\n"
        "  * on (namespace, pod) group_left ()\n"
        f"  max by (namespace, pod) (kube_pod_labels{serving})\n)"
    )
    return f"quantile_over_time(0.95, (\n{busiest}\n)[{window}:{STEP}]) * 8"


def pushed_query(plan: Plan, metric: str, tier: str, window: str) -> str:
    labels = {"job": names.SYNC_JOB, **plan.sync.report_labels, "tier": tier}
    return f"quantile_over_time(0.95, {metric}{selector(labels)}[{window}])"


def _query(url: str, query: str) -> float | None:
    endpoint = url.rstrip("/") + "/api/v1/query?" + urllib.parse.urlencode({"query": query})
    try:
        with urllib.request.urlopen(endpoint, timeout=30) as resp:
            doc: dict[str, Any] = json.loads(resp.read())
    except (urllib.error.URLError, OSError, ValueError) as exc:
        raise PrometheusUnavailable(
            f"--from-prometheus {url}: cannot query it ({exc}); nothing was printed"
        ) from None
    if doc.get("status") != "success":
        raise PrometheusUnavailable(f"--from-prometheus {url}: {doc.get('error', doc)}")
    result = doc["data"]["result"]
    values = [float(r["value"][1]) for r in result]
    values = [v for v in values if not math.isnan(v)]  # NaN: no samples in the window
    return max(values) if values else None


def measure(url: str, plan: Plan, window: str) -> Measured:
    missing: list[str] = []
    egress = _query(url, serving_egress_query(plan, window))
    serving = None
    if egress is None:
        missing.append("the serving pods' egress (no cAdvisor or kube-state-metrics series)")
    else:
        serving = Num(egress, "bit/s", "measured",
                      f"p95 over {window} of the busiest serving pod's egress")  # fmt: skip
    reload, sync = {}, {}
    for t in plan.sync.tiers:
        if not plan.sync.pushgateway:
            missing.append(f"tier {t.name}: nothing pushed (weightSync.report.pushgateway)")
            continue
        if t.reload is not None:
            got = _query(url, pushed_query(plan, names.RELOAD_SECONDS_METRIC, t.name, window))
            if got is None:
                missing.append(f"tier {t.name}: no {names.RELOAD_SECONDS_METRIC}")
            else:
                where = f"p95 over {window} of {names.RELOAD_SECONDS_METRIC}"
                reload[t.name] = Num(got, "s", "measured", where)
        got = _query(url, pushed_query(plan, names.SYNC_SECONDS_METRIC, t.name, window))
        if got is None:
            missing.append(f"tier {t.name}: no {names.SYNC_SECONDS_METRIC}")
        else:
            sync[t.name] = Num(got, "s", "measured",
                               f"p95 over {window} of {names.SYNC_SECONDS_METRIC}")  # fmt: skip
    return Measured(serving, reload, sync, tuple(missing))


def applied(i: Inputs, m: Measured) -> Inputs:
    """``i`` with what ``m`` measured in place of the defaults and declarations."""
    takeover = i.takeover
    if m.serving_egress is not None:
        takeover = replace(takeover, serving_egress=m.serving_egress)
    tiers = tuple(
        replace(t, measured_sync=m.sync.get(t.tier, t.measured_sync),
                measured_reload=m.reload.get(t.tier, t.measured_reload))
        for t in i.rollout.tiers
    )  # fmt: skip
    return replace(i, takeover=takeover, rollout=replace(i.rollout, tiers=tiers))
