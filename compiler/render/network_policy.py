"""NetworkPolicy: only this spec's standby pods (and its sync Jobs) reach the weight port."""

from __future__ import annotations

from compiler import names
from compiler.plan import Plan
from compiler.render.base import Emitted, Expect, Renderer, filename, meta
from compiler.render.weight_sync import sync_labels

KIND = "NetworkPolicy"


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    s = plan.spec.spec
    ports = s.engine.ports
    open_ports = sorted({p for p in (ports.serving, ports.metrics) if p and p != ports.weights})
    name = names.weight_source_policy(plan.spec)
    context = {
        **meta(plan, wave=0),
        "name": name,
        "source_selector": plan.source_selector,
        "standby_selector": s.engine.selector,
        "tier_label": s.engine.tier_label,
        "tier_names": [t.name for t in plan.tiers],
        "sync_selector": sync_labels(plan),
        "weights_port": ports.weights,
        "open_ports": open_ports,
    }
    obj = r.render(
        "networkpolicy.yaml.j2", context, Expect("networking.k8s.io/v1", KIND, name, plan.namespace)
    )
    return [Emitted(filename(KIND, name), obj)]
