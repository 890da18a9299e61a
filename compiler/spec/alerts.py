"""The spec's alerts section: what every alert shares (the evaluation and scrape intervals,
the runbooks, the PrometheusRule's labels) and the two shapes of an alert's own settings.

Each alert module of ``compiler.alerts`` declares its settings next to its rule, with its
defaults (``duration_alert`` or ``rate_alert``); the registry there adds one field per module
to ``Alerts`` (``with_settings``), and an alert reads its own back with ``settings``. This
package sits below the alerts, so it never names one."""

from __future__ import annotations

from collections.abc import Mapping
from fractions import Fraction
from typing import Annotated, Any, Literal, TypeVar

from pydantic import Field, create_model

from compiler.spec.types import (
    BitsPerSecond,
    Labels,
    Millis,
    Model,
    Ratio,
    TierName,
    Url,
    between,
)

Severity = Literal["info", "warning", "critical"]


class RateAlert(Model):
    """A threshold over a rate window. Each alert gives its defaults (``rate_alert``), so a
    spec sets only what it changes (``bandwidthHigh: {window: 10m}``)."""

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


class TierRateAlert(RateAlert):
    """A threshold per standby tier over a rate window (each pod's egress): by default a
    share of what the tier may send, its QoS cap per pod (or the link, where lower)."""

    threshold: BitsPerSecond | None = Field(  # type: ignore[assignment]
        None,
        description="one threshold for the pods of every tier; each tier's own "
        "(thresholds) wins over it. Default: share x each tier's egress",
    )
    share: Ratio = Field(
        Fraction(85, 100),
        description="the default threshold of a tier: this share of its egress per pod "
        "(tiers.<tier>.egress, or network.link where lower; the link for a tier the spec "
        "gives no egress). A pod cannot send more than its cap, and a threshold far below "
        "it pages on a normal takeover",
    )
    thresholds: dict[TierName, BitsPerSecond] = Field(
        default_factory=dict, description="a tier's own threshold, over share and threshold"
    )

    def for_tier(self, tier: TierName, egress_bps: int | None, link_bps: int) -> int:
        """The threshold of ``tier``'s pods (``egress_bps``: its cap per pod, None: none)."""
        if tier in self.thresholds:
            return self.thresholds[tier]
        if self.threshold is not None:
            return self.threshold
        cap = link_bps if egress_bps is None else min(egress_bps, link_bps)
        return int(cap * self.share)


class DurationAlert(Model):
    """An alert with only a ``for``; each alert gives its defaults (``duration_alert``)."""

    for_: Millis = Field(alias="for")
    severity: Severity


# Prometheus takes intervals in whole seconds at the finest worth having; an hour is as
# coarse as an alert on failover traffic can be.
Interval = Annotated[Millis, between(1000, 3600_000)]


class Alerts(Model):
    evaluation_interval: Interval = 30_000
    scrape_interval: Interval = 30_000
    runbook_base_url: Url | None = Field(
        None,
        description="where your own runbooks are: each alert's runbook_url is <this>/<alert "
        "name>. Default: the alert's section of the RUNBOOK.md compiled beside PLAN.md, "
        "browsed at outUrl",
    )
    out_url: Url | None = Field(
        None,
        description="where out/ is browsed on the web, such as "
        "https://github.com/acme/gitops/blob/main/out: each alert's runbook_url points at "
        "its section of this spec's RUNBOOK.md there. Without it (or runbookBaseUrl) the "
        "links go to runbooks.example.com, where nothing is, and compile warns",
    )
    rule_labels: Labels = Field(
        default_factory=lambda: {"release": "kube-prometheus-stack"},
        description="labels on the PrometheusRule; a Prometheus run by prometheus-operator "
        "loads it only where its ruleSelector matches them (kube-prometheus-stack selects "
        "release: <its Helm release>; the default matches a release named "
        "kube-prometheus-stack)",
    )
    # One field per alert module, added by ``with_settings``.


Settings = RateAlert | TierRateAlert | DurationAlert
S = TypeVar("S", bound=Model)


def _named(key: str) -> str:
    return key[0].upper() + key[1:] + "Alert"  # weightsBehind: WeightsBehindAlert


def duration_alert(key: str, *, for_: int, severity: Severity) -> type[DurationAlert]:
    """The settings of the alert ``spec.alerts.<key>`` that has only a ``for``, with these
    defaults (milliseconds): the class ``<Key>Alert``, the name the spec's schema gives it."""
    return create_model(
        _named(key), __base__=DurationAlert, __module__=__name__,
        for_=(Millis, Field(for_, alias="for")), severity=(Severity, severity),
    )  # fmt: skip


def rate_alert(
    key: str, *, threshold: int, window: int, for_: int, severity: Severity
) -> type[RateAlert]:
    """The settings of the alert ``spec.alerts.<key>`` on a threshold over a rate window, with
    these defaults (bit/s, milliseconds), named as ``duration_alert`` names them."""
    return create_model(
        _named(key), __base__=RateAlert, __module__=__name__,
        threshold=(BitsPerSecond, threshold), window=(Millis, window),
        for_=(Millis, Field(for_, alias="for")), severity=(Severity, severity),
    )  # fmt: skip


def tier_rate_alert(key: str, *, window: int, for_: int, severity: Severity) -> type[TierRateAlert]:
    """The settings of the alert ``spec.alerts.<key>`` on a threshold per tier over a rate
    window, named as ``duration_alert`` names them."""
    return create_model(
        _named(key), __base__=TierRateAlert, __module__=__name__,
        window=(Millis, window), for_=(Millis, Field(for_, alias="for")),
        severity=(Severity, severity),
    )  # fmt: skip


def with_settings(fields: Mapping[str, type[Settings]], module: str) -> type[Alerts]:
    """``Alerts`` with one field per alert: its field name -> its settings class, each field
    defaulting to the class's own defaults (the spec writes it as ``to_camel(name)``). The
    class says it lives in ``module``, which must hold it as ``Alerts``."""
    added: dict[str, Any] = {
        name: (cls, Field(default_factory=cls)) for name, cls in fields.items()
    }
    return create_model("Alerts", __base__=Alerts, __module__=module, **added)


def settings(alerts: Alerts, cls: type[S]) -> S:
    """The one alert's settings whose class is ``cls``, out of a spec's alerts section."""
    for name, info in type(alerts).model_fields.items():
        if info.annotation is cls:
            value = getattr(alerts, name)
            assert isinstance(value, cls)
            return value
    raise LookupError(f"no alert with the settings {cls.__name__} in this spec model")
