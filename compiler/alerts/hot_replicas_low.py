"""HotTierBelowReplicas: fewer ready hot pods than tiers.hot.replicas."""

from __future__ import annotations

from compiler import units
from compiler.alerts.base import (
    LABELS_SEEN_MS,
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
PRESENT = 4  # scrapes before every engine pod goes away, in the test of that case


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
            "# not while no pod is exported with its labels (StandbyTierLabelsMissing):\n"
            "# none for the last "
            f"{units.prom_duration(LABELS_SEEN_MS)}, or pods exported with them then still run\n"
            "unless on ()\n"
            f"(\n{indent(ctx.labels_withheld())}\n)\n"
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

    def pod(
        name: str,
        tier: str | None,
        ready: bool,
        namespace: str | None = None,
        n: int = 0,
        *,
        engine: bool = True,
    ) -> list[Series]:
        """A pod as kube-state-metrics exports it: one ready series per condition; ``n``
        samples (default: the timeline's); ``engine`` False: it carries the tier label but
        not the engine's selector labels (another app's pod)."""
        n = n or steps
        out: list[Series] = []
        for condition, value in (("true", ready), ("false", not ready), ("unknown", False)):
            labels = {"namespace": namespace or ctx.ns, "pod": name, "uid": f"uid-{name}",
                      "condition": condition}  # fmt: skip
            out += ctx.ksm_series("kube_pod_status_ready", labels, f"{int(value)}x{n}")
        return (
            out
            + ctx.labels_series(name, tier, f"1x{n}", namespace, selector_labels=engine)
            + ctx.pod_info(name, f"1x{n}", namespace)
        )

    tiers = ctx.tiers
    others = [  # the engine's pods that never count
        *pod("warm-0", "warm" if "warm" in tiers else OTHER_TIER, True),
        *pod("hot-unready", "hot", False),
    ]
    if ctx.engine_labels:  # another app's ready pod labelled hot
        others += pod("other-app-hot-0", "hot", True, engine=False)
    foreign = [*others, *pod("hot-x", "hot", True, OTHER_NAMESPACE)]
    short = [s for i in range(hot.replicas - 1) for s in pod(f"hot-{i}", "hot", True)]
    full = [s for i in range(hot.replicas) for s in pod(f"hot-{i}", "hot", True)]
    unlabelled = [s for i in range(hot.replicas) for s in pod(f"hot-{i}", None, True)]
    firing = [ctx.expected(alert, {})]
    # Every engine pod goes away after PRESENT scrapes (kube-state-metrics stops exporting
    # their series: staleness markers) while another pod stays: the alert fires ``for``
    # later, and is held back again once no labelled pod has been seen for LABELS_SEEN_MS.
    last_seen = (PRESENT - 1) * ctx.scrape_ms
    vanished = ctx.timeline(last_seen + ctx.scrape_ms, cfg.for_)
    held_back = ctx.grid(last_seen + LABELS_SEEN_MS)  # the first evaluation without them
    n = held_back // ctx.scrape_ms + 2
    gone = [Series(s.series, f"1x{PRESENT - 1} stale") for s in [*full, *others]]
    stays = [*pod("hot-x", "hot", True, OTHER_NAMESPACE, n), *pod("store-0", None, True, n=n)]
    # The same pods keep running and stay ready, but from the PRESENT-th scrape on
    # kube-state-metrics exports them without labels: held back, it is not a page.
    lost = ctx.timeline(last_seen + ctx.scrape_ms, cfg.for_)
    dropped: list[Series] = []
    for i in range(hot.replicas):
        name = f"hot-{i}"
        dropped += [
            Series(s.series, f"1x{PRESENT - 1} stale")
            if s.series.startswith("kube_pod_labels")
            else s
            for s in pod(name, "hot", True, n=lost.steps)
        ]
        dropped += ctx.labels_series(
            name, None, " ".join(["_"] * PRESENT + [f"1x{lost.steps - PRESENT}"])
        )
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
                "HotTierBelowReplicas fires when every engine pod went away while another "
                "pod stays in the namespace, for as long as labelled pods were seen "
                f"{units.prom_duration(LABELS_SEEN_MS)} before",
                [*gone, *stays],
                [
                    Check(vanished.fire - ctx.eval_ms, []),
                    Check(vanished.fire, firing),
                    Check(held_back - ctx.eval_ms, firing),
                    Check(held_back, []),
                ],
            ),
            Case(
                f"HotTierBelowReplicas stays silent with {hot.replicas} ready pods whose labels "
                "kube-state-metrics does not export (StandbyTierLabelsMissing fires instead)",
                unlabelled,
                [Check(timeline.end, [])],
            ),
            Case(
                f"HotTierBelowReplicas stays silent when kube-state-metrics stops exporting the "
                f"labels of {hot.replicas} running, ready hot pods (redeployed without the "
                "allowlist)",
                dropped,
                [Check(t, []) for t in (lost.fire - ctx.eval_ms, lost.fire, lost.end)],
            ),
        ]
    )
    return alert
