"""The weight-report CronJob: ``standbyc weights report`` on a schedule.

A Pushgateway without persistence (the prometheus-community chart's default) forgets
every push when it restarts, and a weight-sync Job pushes only when it runs: after a
restart the weight alerts would see no tier until the next sync. This CronJob mounts
the weights claim and pushes again, from each tier's state, exactly what its last sync
pushed (the generation held, and what the engines were confirmed to serve). It skips a
tier whose sync is running, under the same lock, so it never overwrites a newer push.
"""

from __future__ import annotations

from compiler import names
from compiler.emitted import Emitted
from compiler.plan import Plan
from compiler.render.base import Renderer, filename

# One small Python process: what it needs, with room for a large state file.
RESOURCES = {"cpu_request": "50m", "memory_request": "128Mi",
             "cpu_limit": "500m", "memory_limit": "256Mi"}  # fmt: skip
DEADLINE_S = 300  # pushing a few gauges; a Pushgateway that does not answer is retried
HISTORY_TTL_S = 3600


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    sync = plan.sync
    if not sync.report_args:
        return []
    name = plan.names.weight_report
    job_spec = r.render_data(
        "weight-sync-jobspec.yaml.j2",
        {
            "backoff_limit": 1,
            "active_deadline_seconds": DEADLINE_S,
            "ttl_seconds": HISTORY_TTL_S,
            "pod_labels": {**plan.labels, names.REPORT_LABEL: plan.name},
            "pod_annotations": plan.sync.pod.annotations,
            "container": "weight-report",
            "service_account": plan.names.weight_sync_account,
            "image": sync.image,
            "args": list(sync.report_args),
            "resources": RESOURCES,
            "mount": sync.mount,
            "claim": sync.claim,
        },
    )
    context = {
        "name": name,
        "schedule": sync.report_schedule,
        "job_labels": plan.labels,
        "job_spec": job_spec,
    }
    obj = r.render("cronjob.yaml.j2", context, "CronJob")
    without = "weightSync.report.schedule: null, for no weight-report CronJob"
    return [Emitted(filename("CronJob", name), obj, without=without)]
