"""The alert registry: every alert module has its settings in the spec, and every alert
setting in the spec has its module, so no alert is rendered unchecked or checked unrendered."""

from __future__ import annotations

from pydantic.alias_generators import to_camel

from compiler import alerts
from compiler.spec import Alerts, RateAlert

SHARED = {"evaluation_interval", "scrape_interval", "runbook_base_url", "rule_labels"}


def test_registry_and_spec_agree() -> None:
    modules = {alerts.field(m): m for m in alerts.ALERTS}
    assert set(modules) == set(Alerts.model_fields) - SHARED
    for name, module in modules.items():
        assert to_camel(name) == module.KEY, name
        assert (Alerts.model_fields[name].annotation is RateAlert) == module.RATE, name
