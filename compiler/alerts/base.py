"""What the alert modules share: the rule and test-case records, and ``Context``, which
holds the plan and the pieces of PromQL and of promtool series every alert builds from.

Facts the expressions follow:
- ``container_network_transmit_bytes_total`` counts **bytes**; thresholds in the
  spec are bit/s, so expressions multiply the rate by 8 and compare with bit/s.
- cAdvisor series carry no pod labels. The tier comes from kube-state-metrics'
  ``kube_pod_labels`` (needs ``--metric-labels-allowlist=pods=[...]``), joined
  on ``namespace, pod``.

Each alert carries its own test cases: a series that crosses the threshold by
2 % must fire exactly ``for`` after the expression turns true, one 2 % below
must stay silent, and series from another namespace or tier must never match.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from compiler import names, units
from compiler.plan import Plan
from compiler.spec import RateAlert

MARGIN = 0.02  # how far test series sit above or below a threshold
COUNTER_START = 10**12  # far from zero, so rate() extrapolation is never clipped
OTHER_NAMESPACE = "standbyc-test-other"
OTHER_TIER = "batch"


@dataclass(frozen=True)
class Series:
    series: str
    values: str


@dataclass(frozen=True)
class Check:
    eval_ms: int
    exp_alerts: list[dict[str, Any]]


@dataclass(frozen=True)
class Case:
    name: str
    input_series: list[Series]
    checks: list[Check]


@dataclass(frozen=True)
class Timeline:
    fire: int  # first evaluation at which the alert fires
    end: int  # a later evaluation, for "stays silent" checks
    steps: int  # samples per input series


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_ms: int
    labels: dict[str, str]
    annotations: dict[str, str]
    cases: list[Case] = field(default_factory=list)


def selector(matchers: dict[str, str], regex: dict[str, str] | None = None) -> str:
    parts = [f'{k}="{v}"' for k, v in matchers.items()]
    parts += [f'{k}=~"{v}"' for k, v in (regex or {}).items()]
    return "{" + ", ".join(parts) + "}"


def counter_values(per_step: float, steps: int) -> str:
    return f"{COUNTER_START}+{units.float_literal(per_step)}x{steps}"


class Context:
    """What every alert module builds from: the plan, and the expression and test helpers."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.ns = plan.namespace
        self.eval_ms = plan.alerts.evaluation_interval
        self.scrape_ms = plan.alerts.scrape_interval
        self.tier_key = plan.engine.ksm_tier
        self.engine_labels = plan.engine.ksm_selector
        self.base_labels = {"standbyc_spec": plan.name}
        self.runbook = plan.alerts.runbook_base_url.rstrip("/")

    # -- expression pieces ---------------------------------------------------

    def pod_tiers(self, tiers: list[str], namespace: str | None = None) -> str:
        matchers = {"namespace": namespace or self.ns, **self.engine_labels}
        if len(tiers) == 1:
            matchers[self.tier_key] = tiers[0]
            regex = None
        else:
            regex = {self.tier_key: "|".join(tiers)}
        return (
            f"max by (namespace, pod, {self.tier_key}) (\n"
            f"  kube_pod_labels{selector(matchers, regex)}\n)"
        )

    def egress_bytes(self, window_ms: int) -> str:
        matchers = selector({"namespace": self.ns})[:-1] + ', pod!="", interface!="lo"}'
        return (
            "sum by (namespace, pod) (\n"
            f"  rate(container_network_transmit_bytes_total{matchers}"
            f"[{units.prom_duration(window_ms)}])\n)"
        )

    # -- timing ----------------------------------------------------------------

    def timeline(self, true_from_ms: int, for_ms: int) -> Timeline:
        """When an alert true from ``true_from_ms`` fires, and how long the series run."""
        fire = true_from_ms + math.ceil(for_ms / self.eval_ms) * self.eval_ms
        end = fire + 2 * self.eval_ms
        return Timeline(fire, end, end // self.scrape_ms + 2)

    def fires_then_silent(
        self,
        alert: Alert,
        timeline: Timeline,
        firing: tuple[str, list[Series], list[dict[str, Any]]],
        silent: tuple[str, list[Series]],
    ) -> list[Case]:
        """Fires exactly at ``timeline.fire`` (not one evaluation before); stays silent."""
        fire_name, fire_inputs, expected = firing
        silent_name, silent_inputs = silent
        return [
            Case(
                fire_name,
                fire_inputs,
                [Check(timeline.fire - self.eval_ms, []), Check(timeline.fire, expected)],
            ),
            Case(silent_name, silent_inputs, [Check(timeline.end, [])]),
        ]

    def grid(self, ms: int) -> int:
        return math.ceil(ms / self.eval_ms) * self.eval_ms

    def labels_series(
        self, pod: str, tier: str, values: str, namespace: str | None = None
    ) -> Series:
        matchers = {
            "namespace": namespace or self.ns,
            "pod": pod,
            **self.engine_labels,
            self.tier_key: tier,
        }
        return Series("kube_pod_labels" + selector(matchers), values)

    def annotations(self, alert: str, summary: str, description: str) -> dict[str, str]:
        return {
            "summary": summary,
            "description": description,
            "runbook_url": f"{self.runbook}/{alert}",
        }

    def expected(self, alert: Alert, labels: dict[str, str]) -> dict[str, Any]:
        full = {**labels, **alert.labels}
        return {
            "exp_labels": full,
            "exp_annotations": {k: expand(v, full) for k, v in alert.annotations.items()},
        }

    def rate_cases(self, alert: Alert, cfg: RateAlert, *, per_pod: bool) -> list[Case]:
        tiers = [t.name for t in self.plan.tiers]
        # kube_pod_labels appears at t0, once the rate window is full of samples,
        # so the expression turns true exactly at t0.
        t0 = self.grid(cfg.window + 2 * self.scrape_ms)
        timeline = self.timeline(t0, cfg.for_)
        steps = timeline.steps
        scrape_s = self.scrape_ms / 1000
        absent = " ".join(["_"] * (t0 // self.scrape_ms))
        present = f"{absent} 1x{steps}".strip()
        matching = (
            [("standby-0", tiers[0])]
            if per_pod
            else [(f"standby-{i}", tiers[i % len(tiers)]) for i in range(2)]
        )
        share = 1 / len(matching)

        def counter(pod: str, bytes_per_s: float, namespace: str | None = None) -> Series:
            sel = selector({"namespace": namespace or self.ns, "pod": pod, "interface": "eth0"})
            return Series(
                f"container_network_transmit_bytes_total{sel}",
                counter_values(bytes_per_s * scrape_s, steps),
            )

        def inputs(factor: float) -> list[Series]:
            rate = cfg.threshold / 8 * factor * share
            out: list[Series] = []
            for pod, tier in matching:
                out += [counter(pod, rate), self.labels_series(pod, tier, present)]
            loud = cfg.threshold / 8 * 1.5  # far over the threshold, but must not match
            out += [
                counter("standby-0", loud, OTHER_NAMESPACE),
                self.labels_series("standby-0", tiers[0], present, OTHER_NAMESPACE),
                counter("other-tier-0", loud),
                self.labels_series("other-tier-0", OTHER_TIER, present),
            ]
            return out

        if per_pod:
            firing = [
                self.expected(alert, {"namespace": self.ns, "pod": p, self.tier_key: t})
                for p, t in matching
            ]
        else:
            firing = [self.expected(alert, {"namespace": self.ns})]
        bits = units.human_bits(cfg.threshold)
        return self.fires_then_silent(
            alert,
            timeline,
            (
                f"{alert.name} fires {units.prom_duration(cfg.for_)} after crossing "
                f"{bits} by {MARGIN:.0%}",
                inputs(1 + MARGIN),
                firing,
            ),
            (f"{alert.name} stays silent {MARGIN:.0%} below {bits}", inputs(1 - MARGIN)),
        )

    def reported(self) -> tuple[list[str], dict[str, str]] | None:
        """Sync tiers and the selector of the series their Jobs push, or None when the
        spec pushes nothing (no Pushgateway)."""
        sync_tiers = [t.name for t in self.plan.sync.tiers]
        if not sync_tiers or not self.plan.sync.pushgateway:
            return None
        return sync_tiers, {"job": names.SYNC_JOB, **self.plan.sync.report_labels}

    def pushed(self, tier: str, gen: int, steps: int, **other: str) -> Series:
        """A series as the Pushgateway exposes it (scraped with honor_labels: true)."""
        labels = {"job": names.SYNC_JOB, **self.plan.sync.report_labels, "tier": tier, **other}
        return Series(f"{names.WEIGHTS_METRIC}{selector(labels)}", f"{gen}x{steps}")


def indent(text: str, spaces: int = 2) -> str:
    return "\n".join(" " * spaces + line for line in text.splitlines())


def expand(template: str, labels: dict[str, str]) -> str:
    """What Prometheus makes of ``{{ $labels.x }}`` in an annotation (for exp_annotations)."""
    out = template
    for key, value in labels.items():
        out = out.replace("{{ $labels." + key + " }}", value)
    return out
