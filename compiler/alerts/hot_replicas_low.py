"""HotTierBelowReplicas: fewer ready hot pods than tiers.hot.replicas.

It counts only while kube-state-metrics reports the namespace with standbyc's allowlist in
force (``Context.allowlist_in_force``): while kube-state-metrics restarts, or after it was
redeployed without the flag (StandbyTierLabelsMissing then fires), nothing it exports can
say how many hot pods are ready, so the alert does not page. A hot tier whose pods are all
gone pages, and keeps paging until they are back.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from compiler import units
from compiler.alerts.base import (
    OTHER_NAMESPACE,
    OTHER_TIER,
    Alert,
    Case,
    Context,
    Expect,
    Series,
    indent,
    selector,
)
from compiler.alerts.outages import KSM_DOWN_MS, PRESENT, silent_while_ksm_down
from compiler.spec import duration_alert

KEY = "hotReplicasLow"  # its settings in the spec: alerts.hotReplicasLow
LONG_MS = 2 * 3600_000  # how long the cases that must not end by themselves are watched
SETTINGS = duration_alert(KEY, for_=2 * 60_000, severity="critical")


PodFn = Callable[..., list["Series"]]  # _pod_fn's pod(name, tier, ready, namespace, n)


def build(ctx: Context) -> Alert | None:
    hot = next((t for t in ctx.plan.tiers if t.name == "hot"), None)
    if hot is None:
        return None
    cfg = ctx.settings(SETTINGS)
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
            "# only while kube-state-metrics reports the namespace with the allowlist in force:\n"
            "# not while it restarts, nor after it was redeployed without the flag\n"
            "and on ()\n"
            f"{ctx.allowlist_in_force()}\n"
        ),
        for_ms=cfg.for_,
        labels={
            **ctx.base_labels,
            "severity": cfg.severity,
            "namespace": ctx.ns,
            "tier": "hot",
        },
        actions=(
            f"kubectl -n {ctx.ns} get pods -l {_hot_selector(ctx)}: which hot pods are not "
            "ready; kubectl describe pod <pod> says why (scheduling, image, probe).",
            "If they are running and ready, kube-state-metrics lacks the allowlist "
            "(StandbyTierLabelsMissing fires too): run it with "
            f"{ctx.plan.engine.allowlist_flag}.",
            "Until they are back, PLAN.md's timelines for the other tiers are what a failover "
            "costs now.",
        ),
        annotations=ctx.annotations(
            "HotTierBelowReplicas",
            f"Hot tier of {ctx.plan.name} has fewer than {hot.replicas} ready pods",
            f"Fewer than {hot.replicas} hot standby pods of {ctx.plan.name} in "
            f"{ctx.ns} have been ready for {units.prom_duration(cfg.for_)}; "
            f"{_landing(ctx, hot.replicas)} (If the hot pods do run and "
            "are ready, kube-state-metrics' allowlist lacks the engine's label keys: run it "
            f"with {ctx.plan.engine.allowlist_flag}.)",
        ),
    )
    _cases(ctx, alert, hot.replicas, cfg.for_)
    return alert


def _hot_selector(ctx: Context) -> str:
    """The hot pods as kubectl selects them."""
    (hot,) = [t for t in ctx.plan.tiers if t.name == "hot"]
    return ",".join(f"{k}={v}" for k, v in hot.selector.items())


def _landing(ctx: Context, wanted: int) -> str:
    """Where a failover lands now, from the tiers the spec gives replicas."""
    others = [t.name for t in ctx.plan.tiers if t.name != "hot"]
    if not others:
        return (
            f"the spec has no other tier, so a failover now has fewer than the {wanted} hot "
            "pods it plans for to land on."
        )
    return f"a failover now may land on the {' or '.join(others)} standbys."


def _pod_fn(ctx: Context, steps: int) -> PodFn:
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
        samples (default: ``steps``); ``tier`` None: exported without labels;
        ``engine`` False: it carries the tier label but not the engine's selector labels
        (another app's pod)."""
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

    return pod


def _cases(ctx: Context, alert: Alert, replicas: int, for_ms: int) -> None:
    timeline = ctx.timeline(0, for_ms)
    steps = timeline.steps
    pod = _pod_fn(ctx, steps)

    def hot_pods(n: int = 0, count: int = replicas, tier: str | None = "hot") -> list[Series]:
        return [s for i in range(count) for s in pod(f"hot-{i}", tier, True, n=n)]

    def ns(n: int = 0, *, allowlisted: bool = True) -> list[Series]:
        return ctx.namespace_labels(f"1x{n or steps}", allowlisted=allowlisted)

    # The engine's pods that never count: a ready pod of every other tier the spec has (of a
    # tier outside the spec when it has none), and an unready hot pod.
    not_hot = [t for t in ctx.tiers if t != "hot"] or [OTHER_TIER]
    others = [
        *(s for t in not_hot for s in pod(f"{t}-0", t, True)),
        *pod("hot-unready", "hot", False),
    ]
    if ctx.engine_labels:  # another app's ready pod labelled hot
        others += pod("other-app-hot-0", "hot", True, engine=False)
    foreign = [
        *others,
        *pod("hot-x", "hot", True, OTHER_NAMESPACE),
        *ctx.namespace_labels(f"1x{steps}", namespace=OTHER_NAMESPACE),
    ]
    firing = [ctx.expected(alert, {})]
    alert.cases.extend(
        ctx.fires_then_silent(
            alert,
            timeline,
            (
                f"HotTierBelowReplicas fires with {replicas - 1} of {replicas} ready",
                [*hot_pods(count=replicas - 1), *foreign, *ns()],
                firing,
            ),
            (
                f"HotTierBelowReplicas stays silent with {replicas} ready",
                [*hot_pods(), *foreign, *ns()],
            ),
        )
    )
    alert.cases.append(
        Case(
            "HotTierBelowReplicas fires when no hot pod exists at all",
            [*foreign, *ns()],
            [Expect(timeline.fire, firing)],
        )
    )
    alert.cases.extend(
        [
            _all_gone(ctx, pod, [*hot_pods(), *others], firing=firing, for_ms=for_ms),
            _exporter_restarts(ctx, alert, hot_pods, foreign),
            _allowlist_lost_then_rollout(ctx, pod, foreign),
            Case(
                f"HotTierBelowReplicas stays silent with {replicas} ready pods exported without "
                "their labels by a kube-state-metrics without the allowlist "
                "(StandbyTierLabelsMissing fires instead)",
                [*hot_pods(tier=None), *foreign, *ns(allowlisted=False)],
                [Expect(timeline.end, [])],
            ),
        ]
    )


def _all_gone(
    ctx: Context,
    pod: PodFn,
    engine_pods: list[Series],
    *,
    firing: list[dict[str, Any]],
    for_ms: int,
) -> Case:
    """Every engine pod goes away after PRESENT scrapes (kube-state-metrics stops
    exporting their series) while another pod stays in the namespace: the worst state of
    all. It fires ``for`` later and keeps firing, hours on."""
    last_seen = (PRESENT - 1) * ctx.scrape_ms
    vanished = ctx.timeline(last_seen + ctx.scrape_ms, for_ms)
    n = LONG_MS // ctx.scrape_ms + 2
    gone = [Series(s.series, f"1x{PRESENT - 1} stale") for s in engine_pods]
    stays = [
        *pod("hot-x", "hot", True, OTHER_NAMESPACE, n),
        *pod("store-0", None, True, n=n),
        *ctx.namespace_labels(f"1x{n}"),
    ]
    return Case(
        "HotTierBelowReplicas fires when every engine pod went away while another pod stays "
        "in the namespace, and keeps firing until they are back",
        [*gone, *stays],
        [
            Expect(vanished.fire - ctx.eval_ms, []),
            Expect(vanished.fire, firing),
            Expect(ctx.grid(3600_000), firing),
            Expect(ctx.grid(LONG_MS), firing),
        ],
    )


def _exporter_restarts(
    ctx: Context, alert: Alert, hot_pods: Callable[..., list[Series]], foreign: list[Series]
) -> Case:
    """kube-state-metrics is down for KSM_DOWN_MS (a rollout, an eviction) while all hot
    pods stay ready. No page."""
    n = (PRESENT + KSM_DOWN_MS // ctx.scrape_ms) * 2 + LONG_MS // ctx.scrape_ms // 8
    watched = [*hot_pods(n), *ctx.namespace_labels(f"1x{n}")]
    return silent_while_ksm_down(
        ctx, alert, watched, foreign, samples=n, what=" and every hot pod stays ready"
    )


def _allowlist_lost_then_rollout(ctx: Context, pod: PodFn, foreign: list[Series]) -> Case:
    """kube-state-metrics is redeployed without the allowlist (pod labels and the
    sentinel gone), then the engine rolls out: new hot pods, never seen with labels. No
    page, for as long as it lasts (StandbyTierLabelsMissing says why)."""
    n = LONG_MS // ctx.scrape_ms + 2
    old = [f"hot-{i}" for i in range(3)]
    series: list[Series] = []
    for name in old:  # until the redeploy: labelled; then unlabelled; gone at the rollout
        labelled = pod(name, "hot", True, n=PRESENT)
        series += [Series(s.series, f"1x{PRESENT - 1} stale") for s in labelled]
    rollout = 2 * PRESENT
    for i in range(3):
        name = f"hot-new-{i}"
        series += [Series(s.series, f"_x{rollout} " + s.values) for s in
                   pod(name, None, True, n=n - rollout)]  # fmt: skip
    sentinel = ctx.namespace_labels(f"1x{PRESENT - 1} stale")
    unflagged = ctx.namespace_labels(f"_x{PRESENT} 1x{n - PRESENT}", allowlisted=False)
    return Case(
        "HotTierBelowReplicas stays silent when kube-state-metrics is redeployed without the "
        "allowlist and the engine then rolls out",
        [*series, *sentinel, *unflagged, *foreign],
        [Expect(ctx.grid(t), []) for t in (20 * 60_000, 3600_000, LONG_MS)],
    )
