"""Step 4: one module per output kind, registered here in output order.

Adding an output kind means adding one module with ``render(plan, renderer)``,
its template, a line below, and the golden files that change.
"""

from __future__ import annotations

from collections.abc import Callable

from compiler.emitted import Emitted
from compiler.plan import Plan
from compiler.render import (
    admission_policy,
    cilium_qos,
    connection_pool,
    dashboard,
    engine_services,
    istio,
    kustomize_patch,
    kyverno,
    plan_doc,
    rules,
    weight_report,
    weight_store,
    weight_sync,
)
from compiler.render.base import Renderer

RenderFn = Callable[[Plan, Renderer], list[Emitted]]

OUTPUTS: dict[str, RenderFn] = {
    "ciliumEgressQoS": cilium_qos.render,
    "kyverno": kyverno.render,
    "admissionPolicy": admission_policy.render,
    "kustomizePatch": kustomize_patch.render,
    "connectionPool": connection_pool.render,
    "istio": istio.render,
    "rules": rules.render,
    "dashboard": dashboard.render,
    "weightSync": weight_sync.render,
    "weightReport": weight_report.render,
    "engineServices": engine_services.render,
    "plan": plan_doc.render,
    "weightStore": weight_store.render,
}


def render_all(plan: Plan, renderer: Renderer) -> list[Emitted]:
    out: list[Emitted] = []
    for render in OUTPUTS.values():
        out.extend(render(plan, renderer))
    return out
