"""StandbyTierLabelsMissing: pods run in the namespace, but kube-state-metrics exports none
of them with the engine's labels, so the bandwidth alerts cannot see a single pod. By
default kube-state-metrics exports no pod labels at all; it needs
``--metric-labels-allowlist=pods=[<selector keys>,<tier label>]``."""

from __future__ import annotations

from compiler import units
from compiler.alerts.base import LABELS_SEEN_MS, OTHER_NAMESPACE, Alert, Context, Series

KEY = "tierLabelsMissing"  # its settings in the spec: alerts.tierLabelsMissing
RATE = False


def build(ctx: Context) -> Alert | None:
    cfg = ctx.plan.alerts.tier_labels_missing
    flag = ctx.plan.engine.allowlist_flag
    alert = Alert(
        name="StandbyTierLabelsMissing",
        expr=(
            "# pods run in the namespace, none is exported with the engine's labels\n"
            f"{ctx.labels_missing()}\n"
        ),
        for_ms=cfg.for_,
        labels={**ctx.base_labels, "severity": cfg.severity},
        annotations=ctx.annotations(
            "StandbyTierLabelsMissing",
            f"kube-state-metrics exports no pod of {ctx.plan.name} with its tier label",
            f"Pods run in {{{{ $labels.namespace }}}}, but for "
            f"{units.prom_duration(cfg.for_)} no kube_pod_labels series has carried "
            f"{ctx.plan.engine.tier_label!r} and the engine's selector labels, so the "
            f"bandwidth alerts of {ctx.plan.name} see no pod and HotTierBelowReplicas is "
            f"held back ({units.prom_duration(LABELS_SEEN_MS)} after a labelled pod was last "
            f"seen). Run kube-state-metrics with {flag}, or check that the engine's pods "
            "carry these labels and still run.",
        ),
    )
    timeline = ctx.timeline(0, cfg.for_)
    every = f"1x{timeline.steps}"
    tiers = ctx.tiers

    def pods(labelled: bool, *, selector: bool = True, ns: str | None = None) -> list[Series]:
        out: list[Series] = []
        for i, tier in enumerate(tiers):
            name = f"{tier}-{i}"
            shown = tier if labelled else None
            out += ctx.labels_series(name, shown, every, ns, selector_labels=selector)
            out += ctx.pod_info(name, every, ns)
        return out

    foreign = pods(False, ns=OTHER_NAMESPACE)
    firing = [ctx.expected(alert, {"namespace": ctx.ns})]
    alert.cases.extend(
        ctx.fires_then_silent(
            alert,
            timeline,
            (
                "StandbyTierLabelsMissing fires when kube-state-metrics exports no pod label",
                pods(False) + foreign,
                firing,
            ),
            (
                "StandbyTierLabelsMissing stays silent when the labels are exported",
                pods(True) + foreign,
            ),
        )
    )
    if ctx.engine_labels:
        alert.cases.extend(
            ctx.fires_then_silent(
                alert,
                timeline,
                (
                    "StandbyTierLabelsMissing fires when the allowlist names only the tier label",
                    pods(True, selector=False) + foreign,
                    firing,
                ),
                ("StandbyTierLabelsMissing stays silent with no pod at all", foreign),
            )
        )
    return alert
