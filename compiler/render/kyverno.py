"""Kyverno ClusterPolicy that puts Cilium's bandwidth annotations on tier Pods."""

from __future__ import annotations

from compiler.plan import Plan
from compiler.render.base import Emitted, Renderer, filename

KIND = "ClusterPolicy"


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    if "kyverno" not in plan.qos_outputs:
        return []
    name = plan.names.kyverno_policy
    context = {"name": name, "namespace": plan.namespace, "tiers": plan.tiers}
    obj = r.render("kyverno-clusterpolicy.yaml.j2", context, KIND)
    return [Emitted(filename(KIND, name), obj)]
