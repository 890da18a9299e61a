"""WeightSyncJobFailed: a weight-sync Job failed.

With the schedule trigger a CronJob keeps its failed Jobs in its history
(``failedJobsHistoryLimit``) after later runs succeed: a failed Job counts only while no
later run of its CronJob has succeeded (kube-state-metrics'
``kube_cronjob_status_last_successful_time`` against the failed Job's ``kube_job_created``).

With the Argo CD hook, each Job is named after its spec (``compiler.render.weight_sync``),
so a new generation is a new Job beside the old one: a failed Job counts only while no Job
of its tier created after it has succeeded (``kube_job_complete``). A Job of an earlier
standbyc, named without the digest, counts the same way.

Finished Jobs expire (``weightSync.ttlAfterFinished``, 7 days by default): a failed Job
stops counting when Kubernetes deletes it, while StandbyWeightsBehind keeps paging for a
tier it left behind.
"""

from __future__ import annotations

from typing import Any

from compiler.alerts.base import (
    OTHER_NAMESPACE,
    Alert,
    Case,
    Context,
    Expect,
    Series,
    one_of,
    selector,
)
from compiler.alerts.outages import ends_while_ksm_down
from compiler.names import DIGEST_CHARS
from compiler.spec import duration_alert

KEY = "weightSyncFailed"  # its settings in the spec: alerts.weightSyncFailed
# Hook Jobs in the tests: the failed one, and a later one of the same tier.
DIGESTS = ("1a2b3c", "5e6f7a")
SUPERSEDED = "# a later Job of the same tier succeeded: this failure is history"
SETTINGS = duration_alert(KEY, for_=60_000, severity="critical")


def build(ctx: Context) -> Alert | None:
    sync_tiers = [t.name for t in ctx.plan.sync.tiers]
    if not sync_tiers:
        return None
    cfg = ctx.settings(SETTINGS)
    scheduled = ctx.plan.sync.scheduled
    prefix = ctx.plan.names.weight_sync("")
    # A CronJob's Jobs are named <cronjob>-<scheduled time in minutes>, a hook's Jobs
    # <prefix><tier>-<digest of its spec>.
    suffix = "(-[0-9]+)?" if scheduled else f"(-[0-9a-f]{{{DIGEST_CHARS}}})?"
    job_re = f"{prefix}{one_of(sync_tiers)}{suffix}"
    sel = selector({"namespace": ctx.ns, "condition": "true"}, {"job_name": job_re})
    expr = f"max by (namespace, job_name) (kube_job_failed{sel}) > 0\n"
    if scheduled:
        created = selector({"namespace": ctx.ns}, {"job_name": job_re})
        cronjobs = selector({"namespace": ctx.ns}, {"cronjob": f"{prefix}{one_of(sync_tiers)}"})
        expr += (
            "# a later run of the same CronJob succeeded: this failure is history\n"
            "unless on (namespace, job_name)\n"
            "(\n"
            "  label_replace(max by (namespace, job_name) (kube_job_created"
            f'{created}), "cronjob", "$1", "job_name", "(.+)-[0-9]+")\n'
            "  < on (namespace, cronjob) group_left ()\n"
            "  max by (namespace, cronjob) "
            f"(kube_cronjob_status_last_successful_time{cronjobs})\n"
            ")\n"
        )
    else:
        # The tier from a Job's name, past the spec's name: the series are already this
        # spec's, and a pattern without the name lets specs that differ only in names share
        # one run of this test (compiler/reuse/identity.py).
        # Its one group is the tier, even for one tier (label_replace takes $1).
        tiers = "(" + "|".join(sync_tiers) + ")"
        tier_re = ".*" + prefix.removeprefix(ctx.plan.names.spec) + tiers + suffix
        expr += _superseded(ctx.ns, job_re, tier_re)
    alert = Alert(
        name="WeightSyncJobFailed",
        expr=expr,
        for_ms=cfg.for_,
        labels={**ctx.base_labels, "severity": cfg.severity},
        actions=(
            f"kubectl -n {ctx.ns} logs job/<job_name>: the last lines say what failed; the "
            "exit code (kubectl get job <job_name> -o yaml) is in standbyc weights sync "
            "--help (8: a refused signature, 5: engines that did not load it, 4: the store "
            "unreachable).",
            "The tier keeps the weights it held; StandbyWeightsBehind says whether it is behind.",
            "Fix the cause, then run the sync again: an Argo CD sync runs its hook again; "
            "with the schedule trigger the next run does. A later Job of the tier that "
            "succeeds ends this alert.",
        ),
        annotations=ctx.annotations(
            "WeightSyncJobFailed",
            "Weight sync Job {{ $labels.job_name }} failed",
            "Job {{ $labels.namespace }}/{{ $labels.job_name }} failed; its standbys keep the "
            "weights they held before it ran (StandbyWeightsBehind fires while those are "
            "older than model.generation).",
        ),
    )
    ours = prefix + sync_tiers[0] + ("-29400000" if scheduled else f"-{DIGESTS[0]}")
    _cases(ctx, alert, ours)
    return alert


def _cases(ctx: Context, alert: Alert, ours: str) -> None:
    """The cases of the failed Job ``ours``: it fires, stays silent while the Job has not
    failed, resolves after a later success, and ends while kube-state-metrics is down."""
    timeline = ctx.timeline(0, alert.for_ms)
    steps = timeline.steps

    def job(name: str, condition: str, value: int, namespace: str | None = None) -> list[Series]:
        labels = {"namespace": namespace or ctx.ns, "job_name": name, "condition": condition}
        return ctx.ksm_series("kube_job_failed", labels, f"{value}x{steps}")

    foreign = [
        *job(ours, "true", 1, OTHER_NAMESPACE),
        *job("unrelated-job", "true", 1),
        *job(ours, "false", 1),
    ]
    firing = [ctx.expected(alert, {"namespace": ctx.ns, "job_name": ours})]
    alert.cases.extend(
        ctx.fires_then_silent(
            alert,
            timeline,
            (
                "WeightSyncJobFailed fires for a failed weight-sync Job",
                [*job(ours, "true", 1), *foreign, *_history(ctx, ours, steps, None)],
                firing,
            ),
            (
                "WeightSyncJobFailed stays silent while the Job has not failed",
                [*job(ours, "true", 0), *foreign, *_history(ctx, ours, steps, None)],
            ),
        )
    )
    if ctx.plan.sync.scheduled:
        alert.cases.append(_later_success(ctx, alert, ours, job, timeline))
    else:
        alert.cases.append(_later_job(ctx, alert, ours, job, timeline))
    alert.cases.append(
        ends_while_ksm_down(
            ctx,
            alert,
            timeline,
            firing,
            lambda samples: (job(ours, "true", 1), _history(ctx, ours, samples, None)),
        )
    )


CREATED_S = 60  # when the tests' failed Job was created (seconds into the test)


def _superseded(ns: str, job_re: str, tier_re: str) -> str:
    """``unless`` a Job of the same tier, created after the failed one, has succeeded."""
    jobs = selector({"namespace": ns}, {"job_name": job_re})
    created = f"max by (namespace, job_name) (kube_job_created{jobs})"
    complete = selector({"namespace": ns, "condition": "true"}, {"job_name": job_re})

    def tier(vector: str) -> str:
        # tier_re's first group is the tier
        return f'label_replace({vector}, "tier", "$1", "job_name", "{tier_re}")'

    return (
        f"{SUPERSEDED}\n"
        "unless on (namespace, job_name)\n"
        "(\n"
        f"  {tier(created)}\n"
        "  < on (namespace, tier) group_left ()\n"
        "  max by (namespace, tier) (\n"
        f"    {tier(created)}\n"
        "    and on (namespace, job_name)\n"
        f"    (max by (namespace, job_name) (kube_job_complete{complete}) > 0)\n"
        "  )\n"
        ")\n"
    )


def _history(ctx: Context, job_name: str, steps: int, success_at: int | None) -> list[Series]:
    """The Job as kube-state-metrics exports it (its creation time) and, for a CronJob's
    Job, the CronJob's last successful run: from the ``success_at``-th sample (None:
    never)."""
    created = ctx.ksm_series(
        "kube_job_created", {"namespace": ctx.ns, "job_name": job_name}, f"{CREATED_S}x{steps}"
    )
    if not ctx.plan.sync.scheduled or success_at is None:
        return created
    cronjob = job_name.rsplit("-", 1)[0]
    success_s = success_at * ctx.scrape_ms // 1000
    values = f"_x{success_at} {success_s}x{steps - success_at}"
    return created + ctx.ksm_series(
        "kube_cronjob_status_last_successful_time",
        {"namespace": ctx.ns, "cronjob": cronjob},
        values,
    )


def _later_success(ctx: Context, alert: Alert, ours: str, job: Any, timeline: Any) -> Case:
    """The failed run stays in the CronJob's history, but the next run succeeds: the alert
    fires, then resolves once the success is exported, and stays resolved."""
    steps = 4 * timeline.steps
    success_at = timeline.fire // ctx.scrape_ms + 4
    series = [
        *[
            Series(s.series, s.values.replace(f"x{timeline.steps}", f"x{steps}"))
            for s in job(ours, "true", 1)
        ],
        *_history(ctx, ours, steps, success_at),
    ]
    resolved = ctx.grid(success_at * ctx.scrape_ms + ctx.eval_ms)
    return Case(
        "WeightSyncJobFailed resolves when a later run of the CronJob succeeds",
        series,
        [
            Expect(timeline.fire, [ctx.expected(alert, {"namespace": ctx.ns, "job_name": ours})]),
            Expect(resolved, []),
            Expect(resolved + 10 * ctx.eval_ms, []),
        ],
    )


def _later_job(ctx: Context, alert: Alert, ours: str, job: Any, timeline: Any) -> Case:
    """A Job for a new generation (a new name) starts after ours failed: the alert keeps
    firing while it runs, and while only another tier's later Job has succeeded; it
    resolves once the later Job of its own tier succeeds, and stays resolved."""
    steps = 4 * timeline.steps
    created_at = timeline.fire // ctx.scrape_ms + 2  # samples
    success_at = created_at + 4
    sync_tiers = [t.name for t in ctx.plan.sync.tiers]
    later = ours.removesuffix(DIGESTS[0]) + DIGESTS[1]

    def created(name: str, at: int) -> list[Series]:
        values = f"_x{at} {at * ctx.scrape_ms // 1000}x{steps - at}"
        return ctx.ksm_series("kube_job_created", {"namespace": ctx.ns, "job_name": name}, values)

    def complete(name: str, at: int) -> list[Series]:
        labels = {"namespace": ctx.ns, "job_name": name, "condition": "true"}
        return ctx.ksm_series("kube_job_complete", labels, f"0x{at} 1x{steps - at}")

    series = [
        *[Series(s.series, s.values.replace(f"x{timeline.steps}", f"x{steps}"))
          for s in [*job(ours, "true", 1), *_history(ctx, ours, timeline.steps, None)]],
        *created(later, created_at),
        *complete(later, success_at),
    ]  # fmt: skip
    if len(sync_tiers) > 1:  # another tier's new Job, which succeeds at once
        other = ctx.plan.names.weight_sync(sync_tiers[1]) + f"-{DIGESTS[1]}"
        series += [*created(other, created_at), *complete(other, created_at)]
    firing = [ctx.expected(alert, {"namespace": ctx.ns, "job_name": ours})]
    resolved = ctx.grid(success_at * ctx.scrape_ms + ctx.eval_ms)
    return Case(
        "WeightSyncJobFailed keeps firing while a later Job of its tier runs and resolves "
        "when it succeeds",
        series,
        [
            Expect(timeline.fire, firing),
            Expect(ctx.grid((success_at - 1) * ctx.scrape_ms), firing),
            Expect(resolved, []),
            Expect(resolved + 10 * ctx.eval_ms, []),
        ],
    )
