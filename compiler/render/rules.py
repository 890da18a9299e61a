"""PrometheusRule for bandwidth and failover, and promtool unit tests for every alert.

The alerts themselves live in ``compiler.alerts``, one module each; this renders what
they build: one rule group, its plain copy for promtool, and one test file per alert.
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
                "labels": a.labels,
                "annotations": a.annotations,
            }
            for a in defined
        ],
    }
    obj = r.render("prometheusrule.yaml.j2", context, KIND)
    rules_file = f"{name}.rules.yaml"
    out = [
        # prometheus-operator loads the rule only where its labels match ruleSelector.
        Emitted(filename(KIND, name), obj, labels=dict(plan.alerts.rule_labels)),
        # promtool reads plain rule files, not the PrometheusRule object.
        Emitted(f"tests/{rules_file}", {"groups": obj["spec"]["groups"]}),
    ]
    for a in defined:
        test = r.render_data(
            "promtool-test.yaml.j2",
            {
                "rule_file": rules_file,
                "evaluation_interval": _seconds(plan.alerts.evaluation_interval),
                "tests": [
                    {
                        "name": c.name,
                        "interval": _seconds(plan.alerts.scrape_interval),
                        "input_series": [vars(s) for s in c.input_series],
                        "checks": [
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
            },
        )
        out.append(Emitted(f"tests/{_kebab(a.name)}.test.yaml", test))
    return out
