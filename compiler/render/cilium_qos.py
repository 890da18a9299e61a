"""The seed's CiliumEgressQoS object (recorded intent; Cilium does not read it)."""

from __future__ import annotations

from compiler.emitted import Emitted
from compiler.plan import Plan
from compiler.render.base import Renderer, filename

KIND = "CiliumEgressQoS"


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    if "ciliumEgressQoS" not in plan.qos_outputs:
        return []
    name = plan.names.qos
    tiers = [
        {
            "selector": t.selector,
            "priority_value": int(t.priority) if t.priority.isdigit() else t.priority,
            "egress_quantity": t.egress_quantity,
        }
        for t in plan.tiers
    ]
    obj = r.render("ciliumegressqos.yaml.j2", {"name": name, "tiers": tiers}, KIND)
    return [Emitted(filename(KIND, name), obj)]
