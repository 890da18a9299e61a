"""PrometheusRule for bandwidth and failover, and promtool unit tests for every alert.

The alerts themselves live in ``compiler.alerts``, one module each; this renders what
they build: one rule group, and per alert a plain copy of the group holding that alert (what
promtool loads) and its test file.
"""

from __future__ import annotations

from typing import Any

from compiler import units
from compiler.alerts import build_all
from compiler.emitted import Emitted
from compiler.plan import Plan
from compiler.render import runbook
from compiler.render.base import Renderer, filename

KIND = "PrometheusRule"


def _seconds(ms: int) -> str:
    return f"{ms // 1000}s"


def _kebab(name: str) -> str:
    return "".join("-" + c.lower() if c.isupper() else c for c in name).lstrip("-")


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    name = plan.names.rules
    defined = build_all(plan)
    records = list({rec.series: rec for a in defined for rec in a.records}.values())
    interval = units.prom_duration(plan.alerts.evaluation_interval)
    context = {
        "name": name,
        "group": f"standbyc.{plan.namespace}.{plan.name}",
        "interval": interval,
        # Records first: rules in a group run in order, so every alert sees this
        # evaluation's records.
        "records": [{"record": x.record, "expr": x.expr, "labels": x.labels} for x in records],
        "rules": [
            {
                "alert": a.name,
                "expr": a.expr,
                "for": units.prom_duration(a.for_ms),
                "keep_firing_for": a.keep_firing_ms and units.prom_duration(a.keep_firing_ms),
                "labels": a.labels,
                "annotations": a.annotations,
            }
            for a in defined
        ],
    }
    obj = r.render("prometheusrule.yaml.j2", context, KIND)
    # prometheus-operator loads the rule only where its labels match ruleSelector.
    out = [
        Emitted(filename(KIND, name), obj, labels=dict(plan.alerts.rule_labels)),
        runbook.render(plan, r, defined),
    ]
    (group,) = obj["spec"]["groups"]
    emitted_records, emitted_alerts = group["rules"][: len(records)], group["rules"][len(records) :]
    evaluation = _seconds(plan.alerts.evaluation_interval)
    scrape = _seconds(plan.alerts.scrape_interval)
    for a, rule in zip(defined, emitted_alerts, strict=True):
        # promtool reads plain rule files, not the PrometheusRule object. Each alert's tests
        # load a copy of the group holding that alert alone: promtool evaluates every rule
        # it loads at every step of every test, and alerting rules do not read each other
        # (what an alert reads from a record, its tests feed as a series).
        tests = [
            {
                "name": c.name,
                "interval": scrape,
                "input_series": [{"series": s.series, "values": s.values} for s in c.input_series],
                "alert_rule_test": [
                    {
                        "eval_time": _seconds(k.eval_ms),
                        "alertname": a.name,
                        "exp_alerts": k.exp_alerts,
                    }
                    for k in c.expects
                ],
            }
            for c in a.cases
        ]
        out += _tested_copy(_kebab(a.name), group, rule, evaluation, tests)
    for x, rule in zip(records, emitted_records, strict=True):
        check = {"expr": x.series, "eval_time": evaluation,
                 "exp_samples": [{"labels": x.series, "value": x.value}]}  # fmt: skip
        name = f"{x.record} records {units.float_literal(x.value)}"
        tests = [{"name": name, "interval": scrape, "promql_expr_test": [check]}]
        out += _tested_copy(
            x.record.replace(":", "-").replace("_", "-"), group, rule, evaluation, tests
        )
    return out


def _tested_copy(
    stem: str, group: dict[str, Any], rule: Any, evaluation: str, tests: list[dict[str, Any]]
) -> list[Emitted]:
    """A copy of the group holding ``rule`` alone, and the unit test that loads it (plain
    data, built here rather than through a template)."""
    rules_file = f"{stem}.rules.yaml"
    copy = {"groups": [{**group, "rules": [rule]}]}
    test = {"rule_files": [rules_file], "evaluation_interval": evaluation, "tests": tests}
    return [Emitted(f"tests/{rules_file}", copy), Emitted(f"tests/{stem}.test.yaml", test)]
