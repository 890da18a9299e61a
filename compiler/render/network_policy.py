"""NetworkPolicy: only this spec's standby pods (and its sync Jobs) reach the weight port."""

from __future__ import annotations

from compiler.plan import Plan
from compiler.render.base import Emitted, Renderer, filename

KIND = "NetworkPolicy"


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    ports = plan.engine.ports
    open_ports = sorted({p for p in (ports.serving, ports.metrics) if p and p != ports.weights})
    name = plan.names.weight_source_policy
    context = {
        "name": name,
        "source_selector": plan.sync.source_selector,
        "standby_selector": plan.engine.selector,
        "tier_label": plan.engine.tier_label,
        "tier_names": [t.name for t in plan.tiers],
        "sync_selector": plan.sync.pod_labels,
        "weights_port": ports.weights,
        "open_ports": open_ports,
    }
    obj = r.render("networkpolicy.yaml.j2", context, KIND)
    return [Emitted(filename(KIND, name), obj)]
