"""What the alert modules share: the rule and test-case records, and ``Context``, which
holds the plan and the pieces of PromQL and of promtool series every alert builds from.

Facts the expressions follow:
- ``container_network_transmit_bytes_total`` counts **bytes**; thresholds in the
  spec are bit/s, so expressions multiply the rate by 8 and compare with bit/s.
- cAdvisor series carry no pod labels. The tier comes from kube-state-metrics'
  ``kube_pod_labels`` (needs ``--metric-labels-allowlist=pods=[...]``), reduced to one
  series per pod and joined on ``namespace, pod``.

The series the generated tests feed the rules are shaped as a kube-prometheus-stack setup
scrapes them: the kubelet's cAdvisor endpoint (a pod's network counters only on its
sandbox, ``container=""``, one series per interface) and two kube-state-metrics replicas
(a common HA setup), each with the labels those exporters and the ServiceMonitors add.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, TypeVar

from compiler import names, units
from compiler.plan import NAMESPACE_SENTINEL, REPORT_MARGIN_MS, Plan
from compiler.spec import TIER_NAMES, Model, settings

S = TypeVar("S", bound=Model)  # an alert's settings class

MARGIN = 0.02  # how far test series sit above or below a threshold
OTHER_NAMESPACE = names.TEST_OTHER_NAMESPACE
OTHER_TIER = "batch"
KUBELET = {
    "endpoint": "https-metrics",
    "instance": "10.0.0.11:10250",
    "job": "kubelet",
    "metrics_path": "/metrics/cadvisor",
    "node": "node-a",
    "service": "kube-prometheus-stack-kubelet",
    "container": "",
    "image": "registry.k8s.io/pause:3.10",
}
KSM_REPLICAS = ("10.0.1.5:8080", "10.0.2.7:8080")
KSM = {
    "container": "kube-state-metrics",
    "endpoint": "http",
    "job": "kube-state-metrics",
    "service": "kube-prometheus-stack-kube-state-metrics",
}


# kube_namespace_labels' name for the namespace label the allowlist flag exports (the
# namespace's own name, plan.NAMESPACE_SENTINEL): present only while the flag is in force.
SENTINEL_LABEL = names.ksm_label(NAMESPACE_SENTINEL)


@dataclass(frozen=True)
class Series:
    series: str
    values: str


@dataclass(frozen=True)
class Expect:
    eval_ms: int
    exp_alerts: list[dict[str, Any]]


@dataclass(frozen=True)
class Case:
    name: str
    input_series: list[Series]
    expects: list[Expect]  # promtool alert_rule_test: what fires at each time


@dataclass(frozen=True)
class Timeline:
    fire: int  # first evaluation at which the alert fires
    end: int  # a later evaluation, for "stays silent" checks
    steps: int  # samples per input series


@dataclass(frozen=True)
class Record:
    """A recording rule an alert reads, in the alert's group before it. It carries what the
    spec decides (a number), so that the alert's rule does not: the alert's tests feed the
    recorded series, stay the same for every spec that differs only in that number, and
    run once for all of them; the record's own test checks what it records."""

    record: str
    expr: str
    labels: dict[str, str]
    value: float  # what it records, at any evaluation

    @property
    def series(self) -> str:
        return self.record + selector(self.labels)


@dataclass(frozen=True)
class Alert:
    name: str
    expr: str
    for_ms: int
    labels: dict[str, str]
    annotations: dict[str, str]
    cases: list[Case] = field(default_factory=list)
    keep_firing_ms: int = 0  # keep_firing_for; 0: not emitted
    actions: tuple[str, ...] = ()  # what the on-call engineer does, for RUNBOOK.md
    records: tuple[Record, ...] = ()  # what the alert reads, recorded in its group


_REGEX_META = frozenset(".^$*+?()[]{}|\\")


def selector(matchers: dict[str, str], regex: dict[str, str] | None = None) -> str:
    """A label selector; a ``regex`` value with nothing but literal characters (one tier of a
    list) is written as an equality, which is what it means (pint: redundant regexp)."""
    parts = [f'{k}="{v}"' for k, v in matchers.items()]
    parts += [
        f'{k}=~"{v}"' if _REGEX_META & set(v) else f'{k}="{v}"' for k, v in (regex or {}).items()
    ]
    return "{" + ", ".join(parts) + "}"


def one_of(values: list[str]) -> str:
    """A regex part matching exactly one of ``values``: a group only when there is a choice,
    so one tier stays a literal (``-hot``, not ``-(hot)``)."""
    return values[0] if len(values) == 1 else "(" + "|".join(values) + ")"


def counter_values(
    incs: list[float], *, stale: frozenset[int] = frozenset(), reset_at: int | None = None
) -> str:
    """promtool values of a counter: sample 0 is a start far from zero (so rate()'s
    extrapolation is never clipped at zero), sample i adds ``incs[i-1]``. Samples in
    ``stale`` are staleness markers (a failed scrape; the counter still grows); at
    ``reset_at`` the counter restarts from zero and has grown by that step's increment."""
    start = float(10 ** max(12, len(str(int(sum(incs)))) + 1))
    values, v = [start], start
    for i, inc in enumerate(incs, start=1):
        v = inc if i == reset_at else v + inc
        values.append(v)
    tokens: list[str] = []
    i = 0
    while i < len(values):
        if i in stale:
            tokens.append("stale")
            i += 1
            continue
        j = i
        while (
            j + 1 < len(values) and j + 1 not in stale and j + 1 != reset_at and incs[j] == incs[i]
        ):
            j += 1
        lit = units.float_literal
        tokens.append(lit(values[i]) if j == i else f"{lit(values[i])}+{lit(incs[i])}x{j - i}")
        i = j + 1
    return " ".join(tokens)


RUNBOOK = "RUNBOOK.md"  # beside PLAN.md: a section per alert (compiler.render.runbook)
PLACEHOLDER_RUNBOOKS = "https://runbooks.example.com/standbyc"  # where nothing is


def runbook_url(plan: Plan, alert: str) -> str:
    """The spec's own runbooks, else the alert's section of RUNBOOK.md where out/ is
    browsed, else the placeholder (which compile warns about)."""
    a = plan.alerts
    if a.runbook_base_url:
        return f"{a.runbook_base_url.rstrip('/')}/{alert}"
    if a.out_url:
        return f"{a.out_url.rstrip('/')}/{plan.namespace}/{plan.name}/{RUNBOOK}#{alert.lower()}"
    return f"{PLACEHOLDER_RUNBOOKS}/{alert}"


class Context:
    """What every alert module builds from: the plan, and the expression and test helpers."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.ns = plan.namespace
        self.tiers = [t.name for t in plan.tiers]  # the tiers with replicas
        # Every value the tier label can take: a pod relabelled into a tier the spec gives no
        # replicas (a promotion, a hand edit) is still a standby sending traffic.
        self.standby_tiers = list(TIER_NAMES)
        self.eval_ms = plan.alerts.evaluation_interval
        self.scrape_ms = plan.alerts.scrape_interval
        self.tier_key = plan.engine.ksm_tier
        self.engine_labels = plan.engine.ksm_selector
        self.base_labels = {"standbyc_spec": plan.name}

    def look(self, panel: str) -> str:
        """Where an on-call engineer looks: the dashboard's ``panel``, or without one the
        query below in Prometheus."""
        if self.plan.dashboard.enabled:
            return f"Open the dashboard's {panel}"
        return "Run the query below in Prometheus, without its comparison"

    def settings(self, cls: type[S]) -> S:
        """The alert's own settings in the spec (the module's ``SETTINGS``)."""
        return settings(self.plan.alerts, cls)

    # -- expression pieces ---------------------------------------------------

    def pod_tiers(self, tiers: list[str]) -> str:
        """The engine's pods in ``tiers``, one series per pod whatever the tier label says
        and however many kube-state-metrics replicas report it: the tier filters, it never
        becomes part of an alert's identity (a pod relabelled mid-incident stays one alert,
        and two replicas that disagree for a scrape cannot make a join ambiguous)."""
        matchers = {"namespace": self.ns, **self.engine_labels}
        if len(tiers) == 1:
            matchers[self.tier_key] = tiers[0]
            regex = None
        else:
            regex = {self.tier_key: "|".join(tiers)}
        return f"max by (namespace, pod) (\n  kube_pod_labels{selector(matchers, regex)}\n)"

    def tier_of(self) -> str:
        """An annotation fragment: the pod's tier as kube-state-metrics reports it when the
        alert is evaluated (``hot/warm`` while its replicas disagree during a relabel)."""
        key = self.tier_key
        query = f"max by ({key}) (kube_pod_labels{{namespace=%q, pod=%q}})"
        return (
            f'{{{{ range $i, $s := printf "{query}" $labels.namespace $labels.pod | query '
            f'| sortByLabel "{key}" }}}}{{{{ if $i }}}}/{{{{ end }}}}'
            f'{{{{ or (label "{key}" $s) "unlabelled" }}}}{{{{ else }}}}unknown{{{{ end }}}}'
        )

    def labelled_pods(self) -> str:
        """Pods kube-state-metrics exports with the labels every alert selects on."""
        matchers = {"namespace": self.ns, **self.engine_labels}
        return f"kube_pod_labels{selector(matchers, {self.tier_key: '.+'})}"

    def labels_missing(self) -> str:
        """True (one series, label namespace) while pods run in the namespace but none is
        exported with the engine's labels: the allowlist lacks them, or no engine pod runs."""
        return (
            f"group by (namespace) (kube_pod_info{selector({'namespace': self.ns})})\n"
            "unless on (namespace)\n"
            f"group by (namespace) ({self.labelled_pods()})"
        )

    def allowlist_in_force(self) -> str:
        """One series while kube-state-metrics reports the namespace with standbyc's
        allowlist in force (its sentinel label exported): it is up, and it exports pod labels.
        Absent while it restarts, and when it was redeployed without the flag."""
        matchers = {"namespace": self.ns, SENTINEL_LABEL: self.ns}
        return f"max(kube_namespace_labels{selector(matchers)})"

    def allowlist_lost(self) -> str:
        """One series (label namespace) while kube-state-metrics reports the namespace but
        without the allowlist's sentinel label: it runs without standbyc's flag."""
        ns = selector({"namespace": self.ns})
        sentinel = selector({"namespace": self.ns, SENTINEL_LABEL: self.ns})
        return (
            f"group by (namespace) (kube_namespace_labels{ns})\n"
            "unless on (namespace)\n"
            f"group by (namespace) (kube_namespace_labels{sentinel})"
        )

    def namespace_labels(
        self, values: str | list[str], *, allowlisted: bool = True, namespace: str | None = None
    ) -> list[Series]:
        """``kube_namespace_labels`` of a namespace as each replica exports it; with the
        allowlist in force it carries the sentinel label."""
        ns = namespace or self.ns
        labels = {"namespace": ns, **({SENTINEL_LABEL: ns} if allowlisted else {})}
        return self.ksm_series("kube_namespace_labels", labels, values)

    def egress_bytes(self, window_ms: int) -> str:
        matchers = selector({"namespace": self.ns})[:-1] + ', pod!="", interface!="lo"}'
        return (
            "sum by (namespace, pod) (\n"
            f"  rate(container_network_transmit_bytes_total{matchers}"
            f"[{units.prom_duration(window_ms)}])\n)"
        )

    # -- timing ----------------------------------------------------------------

    def timeline(self, true_from_ms: int, for_ms: int) -> Timeline:
        """When an alert true from ``true_from_ms`` fires, and how long the series run:
        the rule first sees the condition at the evaluation on or after ``true_from_ms``,
        and fires at the first evaluation ``for_ms`` after that one."""
        fire = self.grid(true_from_ms) + self.grid(for_ms)
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
                [Expect(timeline.fire - self.eval_ms, []), Expect(timeline.fire, expected)],
            ),
            Case(silent_name, silent_inputs, [Expect(timeline.end, [])]),
        ]

    def grid(self, ms: int) -> int:
        return math.ceil(ms / self.eval_ms) * self.eval_ms

    def labels_series(
        self,
        pod: str,
        tier: str | None,
        values: str | list[str],
        namespace: str | None = None,
        *,
        selector_labels: bool = True,
    ) -> list[Series]:
        """``kube_pod_labels`` of one pod as each kube-state-metrics replica exports it
        (``values`` one string, or one per replica); ``tier`` None: no pod label is
        exported (kube-state-metrics runs without --metric-labels-allowlist);
        ``selector_labels`` False: the allowlist names the tier label only."""
        labels = {"namespace": namespace or self.ns, "pod": pod, "uid": f"uid-{pod}"}
        if tier is not None:
            labels |= {**(self.engine_labels if selector_labels else {}), self.tier_key: tier}
        return self.ksm_series("kube_pod_labels", labels, values)

    def ksm_series(
        self, metric: str, labels: dict[str, str], values: str | list[str]
    ) -> list[Series]:
        """A kube-state-metrics series as each replica exports it."""
        per_replica = [values] * len(KSM_REPLICAS) if isinstance(values, str) else values
        return [
            Series(metric + selector({**KSM, "instance": r, **labels}), v)
            for r, v in zip(KSM_REPLICAS, per_replica, strict=True)
        ]

    def pod_info(self, pod: str, values: str, namespace: str | None = None) -> list[Series]:
        """``kube_pod_info`` of one pod (exported whatever the allowlist says)."""
        labels = {"namespace": namespace or self.ns, "pod": pod, "uid": f"uid-{pod}",
                  "node": KUBELET["node"], "created_by_kind": "ReplicaSet"}  # fmt: skip
        return self.ksm_series("kube_pod_info", labels, values)

    def sandbox_counter(
        self, pod: str, interface: str, values: str, namespace: str | None = None
    ) -> Series:
        """cAdvisor's transmit counter of a pod's sandbox, as the kubelet exports it."""
        labels = {
            **KUBELET,
            "id": f"/kubepods/burstable/pod-{pod}",
            "interface": interface,
            "name": f"sandbox-{pod}",
            "namespace": namespace or self.ns,
            "pod": pod,
        }
        return Series(f"container_network_transmit_bytes_total{selector(labels)}", values)

    def annotations(self, alert: str, summary: str, description: str) -> dict[str, str]:
        return {
            "summary": summary,
            "description": description,
            "runbook_url": runbook_url(self.plan, alert),
        }

    def expected(
        self, alert: Alert, labels: dict[str, str], tier: str | None = None
    ) -> dict[str, Any]:
        """An alert as promtool should see it; ``tier``: what ``tier_of()`` expands to."""
        full = {**labels, **alert.labels}
        annotations = {k: expand(v, full) for k, v in alert.annotations.items()}
        if tier is not None:
            annotations = {k: v.replace(self.tier_of(), tier) for k, v in annotations.items()}
        return {"exp_labels": full, "exp_annotations": annotations}

    def reported(self) -> tuple[list[str], dict[str, str]] | None:
        """Sync tiers and the selector of the series their Jobs push, or None when the
        spec pushes nothing (no Pushgateway)."""
        sync_tiers = [t.name for t in self.plan.sync.tiers]
        if not sync_tiers or not self.plan.sync.pushgateway:
            return None
        return sync_tiers, {"job": names.SYNC_JOB, **self.plan.sync.report_labels}

    def last_pushed(self, metric: str, sel: str) -> str:
        """The last value pushed, for as long as the Pushgateway may have forgotten it
        before the weight-report CronJob pushes again (``report_bridge_ms``): a
        Pushgateway restart neither resolves nor raises an alert on it."""
        window = units.prom_duration(self.plan.sync.report_bridge_ms)
        return f"last_over_time({metric}{sel}[{window}])"

    def none_pushed(self, metric: str, sel: str) -> str:
        """One series (the selector's equality labels) while nothing has been pushed for
        as long as ``last_pushed`` keeps a value."""
        window = units.prom_duration(self.plan.sync.report_bridge_ms)
        return f"absent_over_time({metric}{sel}[{window}])"

    def pushed(
        self,
        tier: str,
        gen: int,
        steps: int,
        *,
        values: str | None = None,
        metric: str = names.WEIGHTS_METRIC,
        **other: str,
    ) -> Series:
        """A series as the Pushgateway exposes it (scraped with honor_labels: true):
        ``gen`` for ``steps`` scrapes, or ``values``."""
        labels = {"job": names.SYNC_JOB, **self.plan.sync.report_labels, "tier": tier, **other}
        return Series(f"{metric}{selector(labels)}", values or f"{gen}x{steps}")

    @property
    def report_gap_ms(self) -> int:
        """The longest wait for the weight-report CronJob (the bridge without its margin)."""
        return self.plan.sync.report_bridge_ms - REPORT_MARGIN_MS

    def forgotten_at(self, restart_ms: int) -> int:
        """The first evaluation at which a value last scraped at ``restart_ms`` (then
        forgotten by the Pushgateway, and never pushed again) is no longer kept."""
        last = restart_ms // self.scrape_ms * self.scrape_ms
        return self.grid(last + self.plan.sync.report_bridge_ms)

    def spread(self, start_ms: int, end_ms: int, points: int = 12) -> list[int]:
        """Evaluations from ``start_ms`` to ``end_ms``, ``points`` apart at most."""
        step = max(self.eval_ms, (end_ms - start_ms) // points)
        return sorted({self.grid(t) for t in range(start_ms, end_ms, step)} | {end_ms})

    def pushgateway_restart(self, gen: int, last_ms: int, end_ms: int, *, back: bool) -> str:
        """The values of a pushed series across a Pushgateway restart without persistence:
        ``gen`` scraped until ``last_ms``, then gone (a stale marker), and with ``back``
        pushed again by the weight-report CronJob after the longest wait of its schedule,
        until ``end_ms``."""
        n = last_ms // self.scrape_ms + 1
        before = f"{gen}x{n - 1} stale"
        if not back:
            return before
        gap = max(1, self.report_gap_ms // self.scrape_ms)
        after = max(0, end_ms // self.scrape_ms - n - gap)
        return f"{before} _x{gap - 1} {gen}x{after}" if gap > 1 else f"{before} {gen}x{after}"


def indent(text: str, spaces: int = 2) -> str:
    return "\n".join(" " * spaces + line for line in text.splitlines())


def expand(template: str, labels: dict[str, str]) -> str:
    """What Prometheus makes of ``{{ $labels.x }}`` in an annotation (for exp_annotations)."""
    out = template
    for key, value in labels.items():
        out = out.replace("{{ $labels." + key + " }}", value)
    return out
