"""The spec's alerts section: what every alert shares (the evaluation and scrape intervals,
the runbooks, the PrometheusRule's labels) and each alert's settings, one field per module
of ``compiler.alerts`` (a test holds the two lists together)."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from compiler.spec.types import BitsPerSecond, Labels, Millis, Model, Url, between

Severity = Literal["info", "warning", "critical"]


class RateAlert(Model):
    """A threshold over a rate window. Each alert's subclass gives its defaults, so a spec
    sets only what it changes (``bandwidthHigh: {window: 10m}``)."""

    threshold: BitsPerSecond
    window: Millis
    for_: Millis = Field(alias="for")
    severity: Severity
    keep_firing_for: Millis | None = Field(
        None,
        description="keep a firing alert firing this long after its expression turns false "
        "(Prometheus >= 2.42): one missed scrape leaves a rate window short of its first "
        "sample and would resolve the alert mid-incident. Default: two scrape intervals; "
        "0s turns it off",
    )


class BandwidthHighAlert(RateAlert):
    threshold: BitsPerSecond = 10 * 10**9
    window: Millis = 5 * 60_000
    for_: Millis = Field(5 * 60_000, alias="for")
    severity: Severity = "warning"


class FailoverSpikeAlert(RateAlert):
    threshold: BitsPerSecond = 50 * 10**9
    window: Millis = 2 * 60_000
    for_: Millis = Field(60_000, alias="for")
    severity: Severity = "critical"


class DurationAlert(Model):
    """An alert with only a ``for``; each alert's subclass gives its defaults."""

    for_: Millis = Field(alias="for")
    severity: Severity


class HotReplicasLowAlert(DurationAlert):
    for_: Millis = Field(2 * 60_000, alias="for")
    severity: Severity = "critical"


class WeightSyncFailedAlert(DurationAlert):
    for_: Millis = Field(60_000, alias="for")
    severity: Severity = "critical"


class WeightsBehindAlert(DurationAlert):
    for_: Millis = Field(15 * 60_000, alias="for")
    severity: Severity = "warning"


class WeightsUnreportedAlert(DurationAlert):
    for_: Millis = Field(30 * 60_000, alias="for")
    severity: Severity = "warning"


class WeightsNotServedAlert(DurationAlert):
    for_: Millis = Field(10 * 60_000, alias="for")
    severity: Severity = "warning"


class WeightsRefusedAlert(DurationAlert):
    for_: Millis = Field(60_000, alias="for")
    severity: Severity = "critical"


class TierLabelsMissingAlert(DurationAlert):
    for_: Millis = Field(15 * 60_000, alias="for")
    severity: Severity = "warning"


# Prometheus takes intervals in whole seconds at the finest worth having; an hour is as
# coarse as an alert on failover traffic can be.
Interval = Annotated[Millis, between(1000, 3600_000)]


class Alerts(Model):
    evaluation_interval: Interval = 30_000
    scrape_interval: Interval = 30_000
    runbook_base_url: Url = "https://runbooks.example.com/standbyc"
    rule_labels: Labels = Field(
        default_factory=lambda: {"release": "kube-prometheus-stack"},
        description="labels on the PrometheusRule; a Prometheus run by prometheus-operator "
        "loads it only where its ruleSelector matches them (kube-prometheus-stack selects "
        "release: <its Helm release>; the default matches a release named "
        "kube-prometheus-stack)",
    )
    bandwidth_high: BandwidthHighAlert = Field(default_factory=BandwidthHighAlert)
    failover_spike: FailoverSpikeAlert = Field(default_factory=FailoverSpikeAlert)
    hot_replicas_low: HotReplicasLowAlert = Field(default_factory=HotReplicasLowAlert)
    weight_sync_failed: WeightSyncFailedAlert = Field(default_factory=WeightSyncFailedAlert)
    weights_behind: WeightsBehindAlert = Field(default_factory=WeightsBehindAlert)
    weights_unreported: WeightsUnreportedAlert = Field(default_factory=WeightsUnreportedAlert)
    weights_not_served: WeightsNotServedAlert = Field(default_factory=WeightsNotServedAlert)
    weights_refused: WeightsRefusedAlert = Field(default_factory=WeightsRefusedAlert)
    tier_labels_missing: TierLabelsMissingAlert = Field(default_factory=TierLabelsMissingAlert)
