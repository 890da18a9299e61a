"""What the Grafana dashboard of a spec shows: its rows of panels, each with its queries,
its reference lines and its alert's threshold, and the dashboard's uid and annotation
query. ``compiler.render.grafana`` writes this model as the Grafana JSON, and
``compiler.render.dashboard`` emits that JSON in the objects Grafana loads.

Every query is built from the pieces the alerts are built from (``compiler.alerts``), with
the namespace a dashboard variable, so a panel draws what its alert compares. Each panel's
description says what it shows and which alert watches it; a panel whose dashed line is an
alert's threshold says ``The dashed line is <alert>'s threshold`` (or ``for``), which the
tests read to hold the line to the rule.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field

from compiler import names, units
from compiler.alerts import (
    bandwidth_high,
    failover_spike,
    hot_replicas_low,
    rate,
    weight_sync_failed,
    weights_behind,
    weights_not_served,
)
from compiler.alerts.base import Context, indent, selector
from compiler.plan import Plan
from compiler.spec import DurationAlert, RateAlert, settings

NAMESPACE = "$namespace"  # the dashboard variable the queries select on
UID_LIMIT = 40  # Grafana's longest dashboard uid


@dataclass(frozen=True)
class Target:
    expr: str
    legend: str
    reference: bool = False  # a constant line from the spec or PLAN.md, drawn dotted


@dataclass(frozen=True)
class PanelDef:
    title: str
    description: str
    unit: str
    targets: tuple[Target, ...]
    width: int
    threshold: float | None = None  # an alert's, drawn dashed
    threshold_below: bool = False  # the alert fires below the line, not above it


@dataclass
class Layout:
    """Rows of panels, in order."""

    rows: list[tuple[str, list[PanelDef]]] = field(default_factory=list)


def uid(plan: Plan) -> str:
    """The dashboard's uid: readable when it fits Grafana's 40 characters, else hashed. The
    namespace and name are joined with "_", which neither may hold (both are DNS labels), so
    team-a/llm and team/a-llm never share one (Grafana would keep only one of them)."""
    readable = f"{plan.namespace}_{plan.name}"
    if len(readable) <= UID_LIMIT:
        return readable
    digest = hashlib.sha256(f"{plan.namespace}/{plan.name}".encode()).hexdigest()
    return f"standbyc-{digest[: UID_LIMIT - len('standbyc-')]}"


def _for(plan: Plan, alert: type[DurationAlert | RateAlert]) -> str:
    """The ``for`` of an alert's settings (its module's ``SETTINGS``), as Prometheus writes
    it."""
    return units.prom_duration(settings(plan.alerts, alert).for_)


def _ctx(plan: Plan) -> Context:
    ctx = Context(plan)
    ctx.ns = NAMESPACE  # every selector reads the namespace from the dashboard variable
    return ctx


def _line(value: float, legend: str) -> Target:
    return Target(f"vector({units.float_literal(value)})", legend, reference=True)


def _bits(value: float) -> str:
    return units.human_bits(value)


def failover_panels(plan: Plan, ctx: Context) -> list[PanelDef]:
    spike = settings(plan.alerts, failover_spike.SETTINGS)
    f = plan.failover
    e = f.egress
    expected = min(e.per_pod, e.cap) * e.replicas
    total = rate.egress_bits(ctx, spike.window, ctx.standby_tiers, per_pod=False)
    tiers = "/".join(ctx.standby_tiers)
    # The takeover carries the traffic until the failed pod's replacement serves: the
    # crash's, the shortest of the modes that end by themselves.
    ends = [m.replaced for m in f.modes if m.replaced is not None]
    carried = min(ends) if ends else None
    # Sampled at the scrape interval over twice that (10 minutes at least).
    step_ms = plan.alerts.scrape_interval
    lookback = units.prom_duration(max(600, math.ceil(2 * (carried or 0) / 60) * 60) * 1000)
    step = units.prom_duration(step_ms)
    for_s = spike.for_ / 1000
    above = (
        f"sum_over_time((\n{total}\n  > bool {units.float_literal(spike.threshold)}\n)"
        f"[{lookback}:{step}]) * {units.float_literal(step_ms / 1000)}"
    )
    duration = [] if carried is None else [
        _line(round(carried, 3), f"PLAN.md takeover: {units.human_seconds(carried)}")
    ]  # fmt: skip
    return [
        PanelDef(
            "Failover: egress of every standby tier",
            f"What the {tiers} tiers of {plan.name} send together, in bit/s over "
            f"{units.prom_duration(spike.window)} (the alert's window). The dotted line is "
            f"PLAN.md's takeover: the failed pods' serving traffic on the {e.tier} tier, "
            f"{_bits(expected)} ({_bits(e.per_pod)} a pod). "
            f"The dashed line is FailoverBandwidthSpike's threshold: it pages when this "
            f"stays above {_bits(spike.threshold)} for {units.prom_duration(spike.for_)}. "
            "The weight sync is not a failover's traffic: its row below draws it.",
            "bps",
            (
                Target(total, "{{namespace}}: all standby tiers"),
                _line(expected, f"PLAN.md takeover: {_bits(expected)}"),
            ),
            16,
            threshold=spike.threshold,
        ),
        PanelDef(
            "Failover: how long the spike lasts",
            f"Seconds of the last {lookback} that the standby "
            f"tiers sent more than FailoverBandwidthSpike's threshold "
            f"({_bits(spike.threshold)}). "
            + (
                ""
                if carried is None
                else f"The dotted line is how long PLAN.md says the takeover carries a crashed "
                f"pod's traffic, until its replacement serves ({units.human_seconds(carried)}). "
            )
            + "The dashed line is FailoverBandwidthSpike's for: past it, the alert pages.",
            "s",
            (Target(above, "{{namespace}}: seconds above the threshold"), *duration),
            8,
            threshold=for_s,
        ),
    ]


def _egress(plan: Plan, ctx: Context, tier: str, egress_bps: int) -> PanelDef:
    high = settings(plan.alerts, bandwidth_high.SETTINGS)
    threshold = bandwidth_high.thresholds(plan, high)[tier]
    e = plan.failover.egress
    takeover = (
        (_line(min(e.per_pod, e.cap), f"PLAN.md takeover per pod: {_bits(min(e.per_pod, e.cap))}"),)
        if tier == e.tier
        else ()
    )
    said = (
        f" and what PLAN.md expects each pod to send when it takes over "
        f"({_bits(min(e.per_pod, e.cap))})"
        if takeover
        else ""
    )
    per_pod = rate.egress_bits(ctx, high.window, [tier], per_pod=True)
    total = rate.egress_bits(ctx, high.window, [tier], per_pod=False)
    return PanelDef(
        f"{tier}: egress per pod and in total",
        f"What each {tier} pod sends, and the tier in total, in bit/s over "
        f"{units.prom_duration(high.window)} (the alert's window). The dotted lines are the "
        f"QoS cap per pod ({_bits(egress_bps)}, tiers.{tier}.egress) and the link "
        f"({_bits(plan.link_bps)}, network.link){said}. The dashed line is "
        f"InferenceBandwidthHigh's threshold: it pages for a pod above "
        f"{_bits(threshold)} for {units.prom_duration(high.for_)} (this tier's threshold); "
        "FailoverBandwidthSpike watches all tiers together.",
        "bps",
        (
            Target(per_pod, "{{pod}}"),
            Target(total, f"{{{{namespace}}}}: tier {tier} in total"),
            _line(egress_bps, f"QoS cap per pod: {_bits(egress_bps)}"),
            _line(plan.link_bps, f"link: {_bits(plan.link_bps)}"),
            *takeover,
        ),
        12,
        threshold=threshold,
    )


def _ready(plan: Plan, ctx: Context, tier: str, replicas: int, width: int) -> PanelDef:
    ready = selector({"namespace": ctx.ns, "condition": "true"})
    # HotTierBelowReplicas' count, per namespace: with no ready pod the line ends, where the
    # rule's "or vector(0)" would hide a selector that matches nothing.
    expr = (
        "sum by (namespace) (\n"
        f"  max by (namespace, pod) (kube_pod_status_ready{ready})\n"
        "  * on (namespace, pod)\n"
        f"{indent(ctx.pod_tiers([tier]))}\n)"
    )
    watched = (
        f"The dashed line is HotTierBelowReplicas's threshold: it pages when fewer than "
        f"{replicas} are ready for {_for(plan, hot_replicas_low.SETTINGS)}."
        if tier == "hot"
        else "No alert pages on it; StandbyTierLabelsMissing fires when no engine pod is "
        "exported with its labels (then this panel is empty too)."
    )
    return PanelDef(
        f"{tier}: ready pods",
        f"Ready {tier} engine pods (kube-state-metrics), against tiers.{tier}.replicas "
        f"({replicas}, the dotted line). {watched}",
        "short",
        (
            Target(expr, f"{{{{namespace}}}}: ready {tier} pods"),
            _line(replicas, f"tiers.{tier}.replicas: {replicas}"),
        ),
        width,
        threshold=float(replicas) if tier == "hot" else None,
        threshold_below=True,
    )


def _pushed(ctx: Context, metric: str, tiers: list[str]) -> str:
    reported = ctx.reported()
    assert reported is not None
    _, labels = reported
    labels = {**labels, "namespace": ctx.ns}
    sel = (
        selector({**labels, "tier": tiers[0]})
        if len(tiers) == 1
        else selector(labels, {"tier": "|".join(tiers)})
    )
    return f"max by (namespace, standbyc_spec, tier) ({ctx.last_pushed(metric, sel)})"


def _generations(plan: Plan, ctx: Context, tier: str, reloads: bool) -> PanelDef:
    wanted = selector({"namespace": ctx.ns, "standbyc_spec": plan.name})
    targets = [
        Target(
            f"max by (namespace, standbyc_spec) ({names.WEIGHTS_WANTED}{wanted})",
            "{{standbyc_spec}}: wanted (model.generation)",
        ),
        Target(_pushed(ctx, names.WEIGHTS_METRIC, [tier]), "{{tier}}: on disk"),
    ]
    served = ""
    if reloads:
        targets.append(Target(_pushed(ctx, names.SERVED_METRIC, [tier]), "{{tier}}: served"))
        served = (
            " StandbyServingOldWeights pages when the generation served stays below the one "
            f"on disk for {_for(plan, weights_not_served.SETTINGS)}."
        )
    return PanelDef(
        f"{tier}: weights generation",
        f"The generation the spec wants (model.generation, recorded by the rule group), "
        f"the one the {tier} weight-sync Job last reported on disk"
        + (", and the one every engine pod confirmed serving" if reloads else "")
        + f". StandbyWeightsBehind pages when the one on disk stays below the one wanted "
        f"for {_for(plan, weights_behind.SETTINGS)}.{served} "
        f"StandbyWeightsUnreported pages when nothing is reported.",
        "none",
        tuple(targets),
        6,
    )


def tier_rows(plan: Plan, ctx: Context) -> list[tuple[str, list[PanelDef]]]:
    reported = ctx.reported() is not None
    sync = {t.name: t for t in plan.sync.tiers}
    rows: list[tuple[str, list[PanelDef]]] = []
    for tier in plan.tiers:
        synced = reported and tier.name in sync
        panels = [
            _egress(plan, ctx, tier.name, tier.egress_bps),
            _ready(plan, ctx, tier.name, tier.replicas, 6 if synced else 12),
        ]
        if synced:
            panels.append(_generations(plan, ctx, tier.name, sync[tier.name].reload is not None))
        rows.append((f"Tier {tier.name}", panels))
    return rows


def sync_row(plan: Plan, ctx: Context) -> list[PanelDef]:
    if ctx.reported() is None:
        return []
    tiers = [t.name for t in plan.sync.tiers]
    reloading = [t.name for t in plan.sync.tiers if t.reload is not None]
    failed = (
        "WeightSyncJobFailed pages when a Job fails "
        f"(for {_for(plan, weight_sync_failed.SETTINGS)})."
    )
    width = 8 if reloading else 12
    panels = [
        PanelDef(
            "Weight sync: bytes the last update fetched",
            "Bytes each tier's weight-sync Job fetched from the store for its last update "
            "(a delta, or whole files), as it pushed them. No alert pages on it; " + failed,
            "bytes",
            (Target(_pushed(ctx, names.SYNC_BYTES_METRIC, tiers), "{{tier}}"),),
            width,
        ),
        PanelDef(
            "Weight sync: duration of the last update",
            "Seconds each tier's last update took, from reading the store's index to the "
            "verified swap, as the Job pushed them. No alert pages on it; " + failed,
            "s",
            (Target(_pushed(ctx, names.SYNC_SECONDS_METRIC, tiers), "{{tier}}"),),
            width,
        ),
    ]
    if reloading:
        expected = plan.failover_inputs.reload.value
        panels.append(
            PanelDef(
                "Engines: time to load the last generation",
                "Seconds the engine pods of each tier that reloads took to load the last "
                "generation when its Job asked them. The dotted line is the reload time "
                f"PLAN.md assumes ({plan.failover_inputs.reload.label()}). "
                "StandbyServingOldWeights pages when a pod did not load it.",
                "s",
                (
                    Target(_pushed(ctx, names.RELOAD_SECONDS_METRIC, reloading), "{{tier}}"),
                    _line(expected, f"PLAN.md reload: {units.human_seconds(expected)}"),
                ),
                8,
            )
        )
    return panels


def layout(plan: Plan) -> Layout:
    ctx = _ctx(plan)
    out = Layout([("Failover", failover_panels(plan, ctx)), *tier_rows(plan, ctx)])
    if sync := sync_row(plan, ctx):
        out.rows.append(("Weight sync", sync))
    return out


def alerts_expr(plan: Plan) -> str:
    """The annotation query: this spec's alerts while they fire."""
    return "ALERTS" + selector(
        {"alertstate": "firing", "namespace": NAMESPACE, "standbyc_spec": plan.name}
    )
