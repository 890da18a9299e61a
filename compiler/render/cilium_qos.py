"""The seed's CiliumEgressQoS object (recorded intent; Cilium does not read it)."""

from __future__ import annotations

from compiler import names
from compiler.plan import Plan
from compiler.render.base import Emitted, Expect, Renderer, filename, meta

API_VERSION = "cilium.io/v2"
KIND = "CiliumEgressQoS"


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    if "ciliumEgressQoS" not in plan.spec.spec.qos.outputs:
        return []
    name = names.qos(plan.spec)
    tiers = [
        {
            "selector": t.selector,
            "priority_value": int(t.priority) if t.priority.isdigit() else t.priority,
            "egress_quantity": t.egress_quantity,
        }
        for t in plan.tiers
    ]
    obj = r.render(
        "ciliumegressqos.yaml.j2",
        {**meta(plan, wave=0), "name": name, "tiers": tiers},
        Expect(API_VERSION, KIND, name, plan.namespace),
    )
    return [Emitted(filename(KIND, name), obj)]
