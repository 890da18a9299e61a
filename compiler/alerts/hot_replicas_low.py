"""HotTierBelowReplicas: fewer ready hot pods than tiers.hot.replicas."""

from __future__ import annotations

from compiler import units
from compiler.alerts.base import (
    OTHER_NAMESPACE,
    OTHER_TIER,
    Alert,
    Case,
    Check,
    Context,
    Series,
    indent,
    selector,
)

KEY = "hotReplicasLow"  # its settings in the spec: alerts.hotReplicasLow
RATE = False


def build(ctx: Context) -> Alert | None:
    hot = next((t for t in ctx.plan.tiers if t.name == "hot"), None)
    if hot is None:
        return None
    cfg = ctx.plan.alerts.hot_replicas_low
    ready = selector({"namespace": ctx.ns, "condition": "true"})
    alert = Alert(
        name="HotTierBelowReplicas",
        expr=(
            "# ready hot pods; 'or vector(0)' makes zero pods count as 0, not as no data\n"
            "(\n"
            "  sum(\n"
            f"    max by (namespace, pod) (kube_pod_status_ready{ready})\n"
            "    * on (namespace, pod)\n"
            f"{indent(ctx.pod_tiers(['hot']), 4)}\n"
            "  )\n"
            "  or vector(0)\n"
            f") < {hot.replicas}\n"
            "# not while no pod is exported with its labels (StandbyTierLabelsMissing)\n"
            "unless on ()\n"
            f"(\n{indent(ctx.labels_missing())}\n)\n"
        ),
        for_ms=cfg.for_,
        labels={
            **ctx.base_labels,
            "severity": cfg.severity,
            "namespace": ctx.ns,
            "tier": "hot",
        },
        annotations=ctx.annotations(
            "HotTierBelowReplicas",
            f"Hot tier of {ctx.plan.name} has fewer than {hot.replicas} ready pods",
            f"Fewer than {hot.replicas} hot standby pods of {ctx.plan.name} in "
            f"{ctx.ns} have been ready for {units.prom_duration(cfg.for_)}; "
            "a failover now would land on warm or cold standbys.",
        ),
    )
    timeline = ctx.timeline(0, cfg.for_)
    steps = timeline.steps
    every = f"1x{steps}"

    def pod(name: str, tier: str | None, ready: bool, namespace: str | None = None) -> list[Series]:
        """A pod as kube-state-metrics exports it: one ready series per condition."""
        out: list[Series] = []
        for condition, value in (("true", ready), ("false", not ready), ("unknown", False)):
            labels = {"namespace": namespace or ctx.ns, "pod": name, "uid": f"uid-{name}",
                      "condition": condition}  # fmt: skip
            out += ctx.ksm_series("kube_pod_status_ready", labels, f"{int(value)}x{steps}")
        return (
            out
            + ctx.labels_series(name, tier, every, namespace)
            + ctx.pod_info(name, every, namespace)
        )

    tiers = [t.name for t in ctx.plan.tiers]
    foreign = [
        *pod("warm-0", "warm" if "warm" in tiers else OTHER_TIER, True),
        *pod("hot-x", "hot", True, OTHER_NAMESPACE),
        *pod("hot-unready", "hot", False),
    ]
    short = [s for i in range(hot.replicas - 1) for s in pod(f"hot-{i}", "hot", True)]
    full = [s for i in range(hot.replicas) for s in pod(f"hot-{i}", "hot", True)]
    unlabelled = [s for i in range(hot.replicas) for s in pod(f"hot-{i}", None, True)]
    firing = [ctx.expected(alert, {})]
    alert.cases.extend(
        ctx.fires_then_silent(
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
    alert.cases.extend(
        [
            Case(
                "HotTierBelowReplicas fires when no hot pod exists at all",
                foreign,
                [Check(timeline.fire, firing)],
            ),
            Case(
                f"HotTierBelowReplicas stays silent with {hot.replicas} ready pods whose labels "
                "kube-state-metrics does not export (StandbyTierLabelsMissing fires instead)",
                unlabelled,
                [Check(timeline.end, [])],
            ),
        ]
    )
    return alert
