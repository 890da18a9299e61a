"""StandbyTierLabelsMissing: kube-state-metrics cannot show the bandwidth and replica
alerts a single pod of the model. Either it runs without standbyc's allowlist (it reports
the namespace, but without the sentinel label the flag exports), or pods run in the
namespace and none is exported with the engine's labels. By default kube-state-metrics
exports no pod or namespace labels at all; it needs the engine's ``allowlist_flag``."""

from __future__ import annotations

from compiler import units
from compiler.alerts.base import OTHER_NAMESPACE, Alert, Context, Series, indent
from compiler.alerts.outages import silent_while_ksm_down
from compiler.spec import duration_alert

KEY = "tierLabelsMissing"  # its settings in the spec: alerts.tierLabelsMissing
SETTINGS = duration_alert(KEY, for_=15 * 60_000, severity="warning")


def build(ctx: Context) -> Alert | None:
    cfg = ctx.settings(SETTINGS)
    flag = ctx.plan.engine.allowlist_flag
    alert = Alert(
        name="StandbyTierLabelsMissing",
        expr=(
            "# kube-state-metrics reports the namespace without the allowlist's sentinel label\n"
            f"(\n{indent(ctx.allowlist_lost(), 2)}\n)\n"
            "or\n"
            "# pods run in the namespace, none is exported with the engine's labels\n"
            f"(\n{indent(ctx.labels_missing(), 2)}\n)\n"
        ),
        for_ms=cfg.for_,
        labels={**ctx.base_labels, "severity": cfg.severity},
        actions=(
            f"Run kube-state-metrics with {flag} (every spec's labels: standbyc compile "
            "prints the one flag for all of them).",
            f"kubectl -n {ctx.ns} get pods --show-labels: the engine's pods must carry "
            f"{ctx.plan.engine.tier_label!r} and the engine's selector labels.",
        ),
        annotations=ctx.annotations(
            "StandbyTierLabelsMissing",
            f"kube-state-metrics shows no pod of {ctx.plan.name} with its tier label",
            f"For {units.prom_duration(cfg.for_)}, kube-state-metrics has either reported "
            "{{ $labels.namespace }} without the label standbyc's allowlist exports, or "
            f"exported none of the pods running there with {ctx.plan.engine.tier_label!r} "
            f"and the engine's selector labels. Until this clears, the bandwidth alerts of "
            f"{ctx.plan.name} see no pod and HotTierBelowReplicas cannot page. Run "
            f"kube-state-metrics with {flag}, or check that the engine's pods carry these "
            "labels.",
        ),
    )
    _cases(ctx, alert, cfg.for_)
    return alert


def _cases(ctx: Context, alert: Alert, for_ms: int) -> None:
    timeline = ctx.timeline(0, for_ms)
    steps = timeline.steps
    every = f"1x{steps}"
    tiers = ctx.tiers

    def pods(
        labelled: bool, *, selector: bool = True, ns: str | None = None, values: str = every
    ) -> list[Series]:
        out: list[Series] = []
        for i, tier in enumerate(tiers):
            name = f"{tier}-{i}"
            shown = tier if labelled else None
            out += ctx.labels_series(name, shown, values, ns, selector_labels=selector)
            out += ctx.pod_info(name, values, ns)
        return out

    def ns(*, allowlisted: bool = True, values: str = every) -> list[Series]:
        return ctx.namespace_labels(values, allowlisted=allowlisted)

    foreign = [
        *pods(False, ns=OTHER_NAMESPACE),
        *ctx.namespace_labels(every, allowlisted=False, namespace=OTHER_NAMESPACE),
    ]
    firing = [ctx.expected(alert, {"namespace": ctx.ns})]
    alert.cases.extend(
        ctx.fires_then_silent(
            alert,
            timeline,
            (
                "StandbyTierLabelsMissing fires when kube-state-metrics exports no pod label",
                [*pods(False), *ns(), *foreign],
                firing,
            ),
            (
                "StandbyTierLabelsMissing stays silent when the labels are exported",
                [*pods(True), *ns(), *foreign],
            ),
        )
    )
    alert.cases.extend(
        ctx.fires_then_silent(
            alert,
            timeline,
            (
                "StandbyTierLabelsMissing fires when kube-state-metrics exports the pod labels "
                "but runs without the namespaces part of the allowlist",
                [*pods(True), *ns(allowlisted=False), *foreign],
                firing,
            ),
            (
                "StandbyTierLabelsMissing stays silent with no pod at all",
                [*ns(), *foreign],
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
                    [*pods(True, selector=False), *ns(), *foreign],
                    firing,
                ),
                (
                    "StandbyTierLabelsMissing stays silent while kube-state-metrics reports "
                    "nothing of the namespace (it does not exist yet)",
                    [*ns(allowlisted=False, values=f"_x{steps}"), *foreign],
                ),
            )
        )
    # kube-state-metrics restarts: every series it exports is stale for KSM_DOWN_MS, then
    # back. Labels and sentinel go and come back together, so nothing pages.
    alert.cases.append(silent_while_ksm_down(ctx, alert, [*pods(True), *ns()], foreign))
