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
from typing import Protocol

from prometheus_client import CollectorRegistry, Gauge, push_to_gateway

from compiler.names import (
    REFUSED_METRIC,
    RELOAD_FAILED_METRIC,
    RELOAD_SECONDS_METRIC,
    SERVED_METRIC,
    SYNC_BYTES_METRIC,
    SYNC_SECONDS_METRIC,
)
from compiler.names import SYNC_JOB as JOB
from compiler.names import WEIGHTS_METRIC as METRIC

HELP = "Model generation of the weights this standby tier holds on disk (0: none)"
SERVED_HELP = (
    "Model generation every engine pod of this standby tier confirmed serving (0: not known)"
)
FAILED_HELP = "Engine pods of this standby tier that did not load the generation on disk"
# From the tier's last-sync.json: (part, field) -> metric and help.
LAST_SYNC = {
    ("update", "bytes"): (
        SYNC_BYTES_METRIC,
        "Bytes the last update of this standby tier fetched from the store",
    ),
    ("update", "seconds"): (
        SYNC_SECONDS_METRIC,
        "Seconds the last update of this standby tier took, to the verified swap",
    ),
    ("reload", "seconds"): (
        RELOAD_SECONDS_METRIC,
        "Seconds the engine pods of this standby tier took to load the last generation",
    ),
}
REFUSED_HELP = (
    "Model generation whose signature this standby tier's last sync refused (0: it refused none)"
)


class Reloaded(Protocol):
    """What the engines answered (``reload.Outcome``)."""

    served: int | None

    @property
    def failed(self) -> int: ...


@dataclass
class Reporter:
    url: str
    labels: dict[str, str] = field(default_factory=dict)
    job: str = JOB
    attempts: int = 3
    timeout: float = 10.0
    error: str = ""

    def push(
        self,
        generation: int | None,
        reloaded: Reloaded | None = None,
        last_sync: dict[str, dict[str, float]] | None = None,
        refused: int | None = None,
    ) -> bool:
        """Push the generation held (None: nothing), for a tier whose engines reload what
        they serve, what the last update took (``StandbyDir.last_sync``), and for a tier that
        verifies signatures what it refused; False (and
        ``error``) if the push failed."""
        registry = CollectorRegistry()
        Gauge(METRIC, HELP, registry=registry).set(generation or 0)
        if reloaded is not None:
            Gauge(SERVED_METRIC, SERVED_HELP, registry=registry).set(reloaded.served or 0)
            Gauge(RELOAD_FAILED_METRIC, FAILED_HELP, registry=registry).set(reloaded.failed)
        for (part, key), (metric, text) in LAST_SYNC.items():
            value = (last_sync or {}).get(part, {}).get(key)
            if value is not None:
                Gauge(metric, text, registry=registry).set(value)
        if refused is not None:
            Gauge(REFUSED_METRIC, REFUSED_HELP, registry=registry).set(refused)
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
