"""Per tier whose engines reload: a headless Service over the tier's engine pods.

The weight-sync Job resolves its name to every ready pod and asks each to load the
generation just swapped in (``standbyc weights sync --reload``). It selects the pods; it
does not route traffic to them, and standbyc emits no NetworkPolicy that selects them:
one would deny every other ingress to the engines, serving traffic included. Where the
user's own policies select them, ``compile`` prints the rule that admits the Job.
"""

from __future__ import annotations

from compiler.emitted import Emitted
from compiler.plan import Plan
from compiler.render.base import Renderer, filename


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    out = []
    for tier in plan.sync.tiers:
        if tier.reload is None:
            continue
        name = tier.reload.service
        context = {"name": name, "selector": tier.selector, "port": tier.reload.port}
        obj = r.render("service-headless.yaml.j2", context, "Service")
        out.append(Emitted(filename("Service", name), obj))
    return out
