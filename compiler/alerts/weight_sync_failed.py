"""WeightSyncJobFailed: a weight-sync Job failed."""

from __future__ import annotations

from compiler.alerts.base import OTHER_NAMESPACE, Alert, Context, Series, selector

KEY = "weightSyncFailed"  # its settings in the spec: alerts.weightSyncFailed
RATE = False


def build(ctx: Context) -> Alert | None:
    sync_tiers = [t.name for t in ctx.plan.sync.tiers]
    if not sync_tiers:
        return None
    cfg = ctx.plan.alerts.weight_sync_failed
    scheduled = ctx.plan.sync.scheduled
    prefix = ctx.plan.names.weight_sync("")
    # A CronJob's Jobs are named <cronjob>-<scheduled time in minutes>.
    suffix = "(-[0-9]+)?" if scheduled else ""
    job_re = f"{prefix}({'|'.join(sync_tiers)}){suffix}"
    sel = selector({"namespace": ctx.ns, "condition": "true"}, {"job_name": job_re})
    alert = Alert(
        name="WeightSyncJobFailed",
        expr=f"max by (namespace, job_name) (kube_job_failed{sel}) > 0\n",
        for_ms=cfg.for_,
        labels={**ctx.base_labels, "severity": cfg.severity},
        annotations=ctx.annotations(
            "WeightSyncJobFailed",
            "Weight sync Job {{ $labels.job_name }} failed",
            "Job {{ $labels.namespace }}/{{ $labels.job_name }} failed; its standbys keep the "
            "weights they held before it ran (StandbyWeightsBehind fires while those are "
            "older than model.generation).",
        ),
    )
    timeline = ctx.timeline(0, cfg.for_)
    steps = timeline.steps
    ours = prefix + sync_tiers[0] + ("-29400000" if scheduled else "")

    def job(name: str, condition: str, value: int, namespace: str | None = None) -> list[Series]:
        labels = {"namespace": namespace or ctx.ns, "job_name": name, "condition": condition}
        return ctx.ksm_series("kube_job_failed", labels, f"{value}x{steps}")

    foreign = [
        *job(ours, "true", 1, OTHER_NAMESPACE),
        *job("unrelated-job", "true", 1),
        *job(ours, "false", 1),
    ]
    alert.cases.extend(
        ctx.fires_then_silent(
            alert,
            timeline,
            (
                "WeightSyncJobFailed fires for a failed weight-sync Job",
                [*job(ours, "true", 1), *foreign],
                [ctx.expected(alert, {"namespace": ctx.ns, "job_name": ours})],
            ),
            (
                "WeightSyncJobFailed stays silent while the Job has not failed",
                [*job(ours, "true", 0), *foreign],
            ),
        )
    )
    return alert
