"""Report the generation a standby tier holds to a Prometheus Pushgateway.

A weight-sync Job is a batch job: it is gone before Prometheus would scrape it, so it
pushes (Prometheus' documented pattern for batch jobs). The group is
``job=<job>`` plus the labels given (namespace, spec, tier), so each tier replaces only
its own series. Prometheus must scrape the Pushgateway with ``honor_labels: true`` for
these labels to survive; the alerts select on them.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway

from compiler.names import SYNC_JOB as JOB
from compiler.names import WEIGHTS_METRIC as METRIC

HELP = "Model generation of the weights this standby tier holds (0: none)"


@dataclass
class Reporter:
    url: str
    labels: dict[str, str] = field(default_factory=dict)
    job: str = JOB
    attempts: int = 3
    timeout: float = 10.0
    error: str = ""

    def push(self, generation: int | None) -> bool:
        """Push the generation held (None: nothing); False (and ``error``) if it failed."""
        registry = CollectorRegistry()
        Gauge(METRIC, HELP, registry=registry).set(generation or 0)
        for attempt in range(self.attempts):
            try:
                push_to_gateway(
                    self.url,
                    job=self.job,
                    registry=registry,
                    grouping_key=self.labels,
                    timeout=self.timeout,
                )
                return True
            except OSError as exc:
                self.error = str(exc)
                if attempt + 1 < self.attempts:
                    time.sleep(0.5 * 2**attempt)
        return False
