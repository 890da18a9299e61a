"""PrometheusRule for bandwidth and failover, and promtool unit tests for every alert.

The alerts themselves live in ``compiler.alerts``, one module each; this renders what
they build: one rule group, and per alert a plain copy of the group holding that alert (what
promtool loads) and its test file.
"""

from __future__ import annotations

from compiler import units
from compiler.alerts import build_all
from compiler.plan import Plan
from compiler.render.base import Emitted, Renderer, filename

KIND = "PrometheusRule"


def _seconds(ms: int) -> str:
    return f"{ms // 1000}s"


def _kebab(name: str) -> str:
    return "".join("-" + c.lower() if c.isupper() else c for c in name).lstrip("-")


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    name = plan.names.rules
    defined = build_all(plan)
    interval = units.prom_duration(plan.alerts.evaluation_interval)
    context = {
        "name": name,
        "group": f"standbyc.{plan.namespace}.{plan.name}",
        "interval": interval,
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
    out = [Emitted(filename(KIND, name), obj, labels=dict(plan.alerts.rule_labels))]
    (group,) = obj["spec"]["groups"]
    for a, rule in zip(defined, group["rules"], strict=True):
        # promtool reads plain rule files, not the PrometheusRule object. Each alert's tests
        # load a copy of the group holding that alert alone: promtool evaluates every rule
        # it loads at every step of every test, and alerting rules do not read each other.
        stem = _kebab(a.name)
        rules_file = f"{stem}.rules.yaml"
        out.append(Emitted(f"tests/{rules_file}", {"groups": [{**group, "rules": [rule]}]}))
        # A promtool unit test is plain data, built here rather than through a template.
        test = {
            "rule_files": [rules_file],
            "evaluation_interval": _seconds(plan.alerts.evaluation_interval),
            "tests": [
                {
                    "name": c.name,
                    "interval": _seconds(plan.alerts.scrape_interval),
                    "input_series": [
                        {"series": s.series, "values": s.values} for s in c.input_series
                    ],
                    "alert_rule_test": [
                        {
                            "eval_time": _seconds(k.eval_ms),
                            "alertname": a.name,
                            "exp_alerts": k.exp_alerts,
                        }
                        for k in c.checks
                    ],
                }
                for c in a.cases
            ],
        }
        out.append(Emitted(f"tests/{stem}.test.yaml", test))
    return out
