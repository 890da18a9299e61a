"""Kyverno ClusterPolicy that puts Cilium's bandwidth annotations on tier Pods."""

from __future__ import annotations

from compiler import names
from compiler.plan import Plan
from compiler.render.base import Emitted, Expect, Renderer, filename, meta

API_VERSION = "kyverno.io/v1"
KIND = "ClusterPolicy"


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    if "kyverno" not in plan.spec.spec.qos.outputs:
        return []
    name = names.kyverno_policy(plan.spec)
    # The policy must exist before the tier Pods are (re)created to mutate them.
    context = {**meta(plan, wave=-1), "name": name, "tiers": plan.tiers}
    obj = r.render("kyverno-clusterpolicy.yaml.j2", context, Expect(API_VERSION, KIND, name, None))
    return [Emitted(filename(KIND, name), obj)]
