"""PrometheusRule for bandwidth and failover, and promtool unit tests for every alert.

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
from compiler.render.base import Emitted, Renderer, filename
from compiler.spec import RateAlert

KIND = "PrometheusRule"
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


def _selector(matchers: dict[str, str], regex: dict[str, str] | None = None) -> str:
    parts = [f'{k}="{v}"' for k, v in matchers.items()]
    parts += [f'{k}=~"{v}"' for k, v in (regex or {}).items()]
    return "{" + ", ".join(parts) + "}"


def _expand(template: str, labels: dict[str, str]) -> str:
    """What Prometheus makes of ``{{ $labels.x }}`` in an annotation (for exp_annotations)."""
    out = template
    for key, value in labels.items():
        out = out.replace("{{ $labels." + key + " }}", value)
    return out


def _values(per_step: float, steps: int) -> str:
    return f"{COUNTER_START}+{units.float_literal(per_step)}x{steps}"


def _seconds(ms: int) -> str:
    return f"{ms // 1000}s"


class _Builder:
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
            f"  kube_pod_labels{_selector(matchers, regex)}\n)"
        )

    def egress_bytes(self, window_ms: int) -> str:
        matchers = _selector({"namespace": self.ns})[:-1] + ', pod!="", interface!="lo"}'
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
        return Series("kube_pod_labels" + _selector(matchers), values)

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
            "exp_annotations": {k: _expand(v, full) for k, v in alert.annotations.items()},
        }

    # -- the alerts ------------------------------------------------------------

    def bandwidth_high(self, cfg: RateAlert) -> Alert:
        tiers = [t.name for t in self.plan.tiers]
        threshold = cfg.threshold
        bits = units.human_bits(threshold)
        alert = Alert(
            name="InferenceBandwidthHigh",
            expr=(
                f"# bytes/s x 8 = bit/s; threshold {bits} (spec.alerts.bandwidthHigh)\n"
                f"(\n{_indent(self.egress_bytes(cfg.window))}\n"
                f"  * on (namespace, pod) group_left ({self.tier_key})\n"
                f"{_indent(self.pod_tiers(tiers))}\n"
                f") * 8 > {units.float_literal(threshold)}\n"
            ),
            for_ms=cfg.for_,
            labels={**self.base_labels, "severity": cfg.severity},
            annotations=self.annotations(
                "InferenceBandwidthHigh",
                f"Pod {{{{ $labels.pod }}}} sends more than {bits}",
                f"Egress of {{{{ $labels.namespace }}}}/{{{{ $labels.pod }}}} "
                f"(tier {{{{ $labels.{self.tier_key} }}}}) has stayed above {bits} "
                f"({units.human_bytes_per_second(threshold / 8)}) for "
                f"{units.prom_duration(cfg.for_)}.",
            ),
        )
        return _with_cases(alert, self._rate_cases(alert, cfg, per_pod=True))

    def failover_spike(self, cfg: RateAlert) -> Alert:
        tiers = [t.name for t in self.plan.tiers]
        threshold = cfg.threshold
        bits = units.human_bits(threshold)
        alert = Alert(
            name="FailoverBandwidthSpike",
            expr=(
                f"# bytes/s x 8 = bit/s, summed over tiers {', '.join(tiers)}; "
                f"threshold {bits} (spec.alerts.failoverSpike)\n"
                f"sum by (namespace) (\n{_indent(self.egress_bytes(cfg.window))}\n"
                "  * on (namespace, pod)\n"
                f"{_indent(self.pod_tiers(tiers))}\n"
                f") * 8 > {units.float_literal(threshold)}\n"
            ),
            for_ms=cfg.for_,
            labels={**self.base_labels, "severity": cfg.severity},
            annotations=self.annotations(
                "FailoverBandwidthSpike",
                f"Standby tiers of {self.plan.name} send more than {bits} together",
                f"The {'/'.join(tiers)} tiers in {{{{ $labels.namespace }}}} have sent more than "
                f"{bits} ({units.human_bytes_per_second(threshold / 8)}) in total for "
                f"{units.prom_duration(cfg.for_)}; a failover or weight sync is saturating "
                "the link.",
            ),
        )
        return _with_cases(alert, self._rate_cases(alert, cfg, per_pod=False))

    def _rate_cases(self, alert: Alert, cfg: RateAlert, *, per_pod: bool) -> list[Case]:
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
            sel = _selector({"namespace": namespace or self.ns, "pod": pod, "interface": "eth0"})
            return Series(
                f"container_network_transmit_bytes_total{sel}",
                _values(bytes_per_s * scrape_s, steps),
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

    def hot_replicas_low(self) -> Alert | None:
        hot = next((t for t in self.plan.tiers if t.name == "hot"), None)
        if hot is None:
            return None
        cfg = self.plan.alerts.hot_replicas_low
        ready = _selector({"namespace": self.ns, "condition": "true"})
        alert = Alert(
            name="HotTierBelowReplicas",
            expr=(
                "# ready hot pods; 'or vector(0)' makes zero pods count as 0, not as no data\n"
                "(\n"
                "  sum(\n"
                f"    max by (namespace, pod) (kube_pod_status_ready{ready})\n"
                "    * on (namespace, pod)\n"
                f"{_indent(self.pod_tiers(['hot']), 4)}\n"
                "  )\n"
                "  or vector(0)\n"
                f") < {hot.replicas}\n"
            ),
            for_ms=cfg.for_,
            labels={
                **self.base_labels,
                "severity": cfg.severity,
                "namespace": self.ns,
                "tier": "hot",
            },
            annotations=self.annotations(
                "HotTierBelowReplicas",
                f"Hot tier of {self.plan.name} has fewer than {hot.replicas} ready pods",
                f"Fewer than {hot.replicas} hot standby pods of {self.plan.name} in "
                f"{self.ns} have been ready for {units.prom_duration(cfg.for_)}; "
                "a failover now would land on warm or cold standbys.",
            ),
        )
        timeline = self.timeline(0, cfg.for_)
        steps = timeline.steps

        def pod(name: str, tier: str, ready: int, namespace: str | None = None) -> list[Series]:
            sel = _selector({"namespace": namespace or self.ns, "pod": name, "condition": "true"})
            return [
                Series(f"kube_pod_status_ready{sel}", f"{ready}x{steps}"),
                self.labels_series(name, tier, f"1x{steps}", namespace),
            ]

        foreign = [
            *pod(
                "warm-0", "warm" if "warm" in [t.name for t in self.plan.tiers] else OTHER_TIER, 1
            ),
            *pod("hot-x", "hot", 1, OTHER_NAMESPACE),
            *pod("hot-unready", "hot", 0),
        ]
        short = [s for i in range(hot.replicas - 1) for s in pod(f"hot-{i}", "hot", 1)]
        full = [s for i in range(hot.replicas) for s in pod(f"hot-{i}", "hot", 1)]
        firing = [self.expected(alert, {})]
        alert.cases.extend(
            self.fires_then_silent(
                alert,
                timeline,
                (
                    f"HotTierBelowReplicas fires with {hot.replicas - 1} of {hot.replicas} ready",
                    short + foreign,
                    firing,
                ),
                (f"HotTierBelowReplicas stays silent with {hot.replicas} ready", full + foreign),
            )
        )
        alert.cases.append(
            Case(
                "HotTierBelowReplicas fires when no hot pod exists at all",
                foreign,
                [Check(timeline.fire, firing)],
            )
        )
        return alert

    def weight_sync_failed(self) -> Alert | None:
        sync_tiers = [t.name for t in self.plan.sync.tiers]
        if not sync_tiers:
            return None
        cfg = self.plan.alerts.weight_sync_failed
        scheduled = self.plan.sync.scheduled
        prefix = self.plan.names.weight_sync("")
        # A CronJob's Jobs are named <cronjob>-<scheduled time in minutes>.
        suffix = "(-[0-9]+)?" if scheduled else ""
        job_re = f"{prefix}({'|'.join(sync_tiers)}){suffix}"
        sel = _selector({"namespace": self.ns, "condition": "true"}, {"job_name": job_re})
        alert = Alert(
            name="WeightSyncJobFailed",
            expr=f"max by (namespace, job_name) (kube_job_failed{sel}) > 0\n",
            for_ms=cfg.for_,
            labels={**self.base_labels, "severity": cfg.severity},
            annotations=self.annotations(
                "WeightSyncJobFailed",
                "Weight sync Job {{ $labels.job_name }} failed",
                "Job {{ $labels.namespace }}/{{ $labels.job_name }} failed; its standbys still "
                f"serve an older model than generation {self.plan.generation}.",
            ),
        )
        timeline = self.timeline(0, cfg.for_)
        steps = timeline.steps
        ours = prefix + sync_tiers[0] + ("-29400000" if scheduled else "")

        def job(name: str, condition: str, value: int, namespace: str | None = None) -> Series:
            s = _selector(
                {"namespace": namespace or self.ns, "job_name": name, "condition": condition}
            )
            return Series(f"kube_job_failed{s}", f"{value}x{steps}")

        foreign = [
            job(ours, "true", 1, OTHER_NAMESPACE),
            job("unrelated-job", "true", 1),
            job(ours, "false", 1),
        ]
        alert.cases.extend(
            self.fires_then_silent(
                alert,
                timeline,
                (
                    "WeightSyncJobFailed fires for a failed weight-sync Job",
                    [job(ours, "true", 1), *foreign],
                    [self.expected(alert, {"namespace": self.ns, "job_name": ours})],
                ),
                (
                    "WeightSyncJobFailed stays silent while the Job has not failed",
                    [job(ours, "true", 0), *foreign],
                ),
            )
        )
        return alert

    def _reported(self) -> tuple[list[str], dict[str, str]] | None:
        """Sync tiers and the selector of the series their Jobs push, or None when the
        spec pushes nothing (no Pushgateway)."""
        sync_tiers = [t.name for t in self.plan.sync.tiers]
        if not sync_tiers or not self.plan.sync.pushgateway:
            return None
        return sync_tiers, {"job": names.SYNC_JOB, **self.plan.sync.report_labels}

    def pushed(self, tier: str, gen: int, steps: int, **other: str) -> Series:
        """A series as the Pushgateway exposes it (scraped with honor_labels: true)."""
        labels = {"job": names.SYNC_JOB, **self.plan.sync.report_labels, "tier": tier, **other}
        return Series(f"{names.WEIGHTS_METRIC}{_selector(labels)}", f"{gen}x{steps}")

    def weights_behind(self) -> Alert | None:
        reported = self._reported()
        if reported is None:
            return None
        sync_tiers, pushed = reported
        cfg = self.plan.alerts.weights_behind
        generation = self.plan.generation
        sel = _selector(pushed, {"tier": "|".join(sync_tiers)})
        alert = Alert(
            name="StandbyWeightsBehind",
            expr=(
                f"# generation {generation} is spec.model.generation; the weight-sync Jobs "
                "push what each tier holds\n"
                f"max by (namespace, standbyc_spec, tier) (\n"
                f"  {names.WEIGHTS_METRIC}{sel}\n"
                f") < {generation}\n"
            ),
            for_ms=cfg.for_,
            labels={**self.base_labels, "severity": cfg.severity},
            annotations=self.annotations(
                "StandbyWeightsBehind",
                f"Tier {{{{ $labels.tier }}}} of {self.plan.name} holds an older model",
                "The {{ $labels.tier }} standbys of "
                f"{{{{ $labels.namespace }}}}/{self.plan.name} have held weights generation "
                f"{{{{ $value }}}}, below {generation}, for {units.prom_duration(cfg.for_)}; a "
                "failover to them would serve stale weights.",
            ),
        )
        timeline = self.timeline(0, cfg.for_)
        steps, tier = timeline.steps, sync_tiers[-1]
        foreign = [
            self.pushed(tier, generation - 1, steps, namespace=OTHER_NAMESPACE),
            self.pushed(tier, generation - 1, steps, standbyc_spec="another-spec"),
            self.pushed(OTHER_TIER, generation - 1, steps),
        ]
        behind = {"namespace": self.ns, "tier": tier}
        firing = self.expected(alert, behind)
        firing["exp_annotations"]["description"] = firing["exp_annotations"]["description"].replace(
            "{{ $value }}", str(generation - 1)
        )
        current = [self.pushed(t, generation, steps) for t in sync_tiers if t != tier]
        alert.cases.extend(
            self.fires_then_silent(
                alert,
                timeline,
                (
                    "StandbyWeightsBehind fires for a tier one generation behind",
                    [self.pushed(tier, generation - 1, steps), *current, *foreign],
                    [firing],
                ),
                (
                    "StandbyWeightsBehind stays silent when every tier is current",
                    [self.pushed(tier, generation, steps), *current, *foreign],
                ),
            )
        )
        return alert

    def weights_unreported(self) -> Alert | None:
        reported = self._reported()
        if reported is None:
            return None
        sync_tiers, pushed = reported
        cfg = self.plan.alerts.weights_unreported
        # absent() keeps the labels of its equality matchers: one alert per silent tier.
        parts = [
            f"absent({names.WEIGHTS_METRIC}{_selector({**pushed, 'tier': t})})" for t in sync_tiers
        ]
        alert = Alert(
            name="StandbyWeightsUnreported",
            expr=(
                "# no weight-sync Job of the tier has pushed what it holds (or the "
                "Pushgateway is not scraped)\n" + "\nor\n".join(parts) + "\n"
            ),
            for_ms=cfg.for_,
            labels={**self.base_labels, "severity": cfg.severity},
            annotations=self.annotations(
                "StandbyWeightsUnreported",
                f"Tier {{{{ $labels.tier }}}} of {self.plan.name} reports no weights generation",
                "No weights generation of the {{ $labels.tier }} standbys of "
                f"{{{{ $labels.namespace }}}}/{self.plan.name} has reached Prometheus for "
                f"{units.prom_duration(cfg.for_)}: their weight-sync Job has not run or could "
                "not push, or the Pushgateway is not scraped with honor_labels: true.",
            ),
        )
        timeline = self.timeline(0, cfg.for_)
        steps, tier = timeline.steps, sync_tiers[0]
        others = [self.pushed(t, self.plan.generation, steps) for t in sync_tiers if t != tier]
        foreign = [
            self.pushed(tier, self.plan.generation, steps, namespace=OTHER_NAMESPACE),
            self.pushed(tier, self.plan.generation, steps, standbyc_spec="another-spec"),
        ]
        silent_tier = {"job": names.SYNC_JOB, **self.plan.sync.report_labels, "tier": tier}
        alert.cases.extend(
            self.fires_then_silent(
                alert,
                timeline,
                (
                    "StandbyWeightsUnreported fires for a tier that never reported",
                    [*others, *foreign],
                    [self.expected(alert, silent_tier)],
                ),
                (
                    "StandbyWeightsUnreported stays silent when every tier reports",
                    [self.pushed(tier, self.plan.generation, steps), *others, *foreign],
                ),
            )
        )
        return alert


def _indent(text: str, spaces: int = 2) -> str:
    return "\n".join(" " * spaces + line for line in text.splitlines())


def _with_cases(alert: Alert, cases: list[Case]) -> Alert:
    alert.cases.extend(cases)
    return alert


def alerts(plan: Plan) -> list[Alert]:
    b = _Builder(plan)
    a = plan.alerts
    found = [
        b.bandwidth_high(a.bandwidth_high),
        b.failover_spike(a.failover_spike),
        b.hot_replicas_low(),
        b.weight_sync_failed(),
        b.weights_behind(),
        b.weights_unreported(),
    ]
    return [x for x in found if x is not None]


def _kebab(name: str) -> str:
    return "".join("-" + c.lower() if c.isupper() else c for c in name).lstrip("-")


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    name = plan.names.rules
    defined = alerts(plan)
    interval = units.prom_duration(plan.alerts.evaluation_interval)
    context = {
        "name": name,
        "group": f"standbyc.{plan.namespace}.{plan.name}",
        "interval": interval,
        "rules": [
            {
                "alert": a.name,
                "expr": a.expr,
                "for": units.prom_duration(a.for_ms),
                "labels": a.labels,
                "annotations": a.annotations,
            }
            for a in defined
        ],
    }
    obj = r.render("prometheusrule.yaml.j2", context, KIND)
    rules_file = f"{name}.rules.yaml"
    out = [
        # prometheus-operator loads the rule only where its labels match ruleSelector.
        Emitted(filename(KIND, name), obj, labels=dict(plan.alerts.rule_labels)),
        # promtool reads plain rule files, not the PrometheusRule object.
        Emitted(f"tests/{rules_file}", {"groups": obj["spec"]["groups"]}),
    ]
    for a in defined:
        test = r.render_data(
            "promtool-test.yaml.j2",
            {
                "rule_file": rules_file,
                "evaluation_interval": _seconds(plan.alerts.evaluation_interval),
                "tests": [
                    {
                        "name": c.name,
                        "interval": _seconds(plan.alerts.scrape_interval),
                        "input_series": [vars(s) for s in c.input_series],
                        "checks": [
                            {
                                "eval_time": _seconds(k.eval_ms),
                                "alertname": a.name,
                                "exp_alerts": k.exp_alerts,
                            }
                            for k in c.checks
                        ],
                    }
                    for c in a.cases
                ],
            },
        )
        out.append(Emitted(f"tests/{_kebab(a.name)}.test.yaml", test))
    return out
