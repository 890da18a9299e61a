"""A kustomize Component that annotates the tiers' Deployment pod templates."""

from __future__ import annotations

from compiler import yamlio
from compiler.emitted import Emitted
from compiler.plan import Plan
from compiler.render.base import Renderer

KIND = "Component"
DIRECTORY = "egress-patch"


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    if "kustomizePatch" not in plan.qos_outputs:
        return []
    tiers = []
    for t in plan.tiers:
        # A strategic-merge patch creates the annotations map when it is absent
        # (a JSON6902 "add" would fail); with a target, its name is not used.
        patch = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "any"},
            "spec": {
                "template": {
                    "metadata": {
                        "annotations": {
                            "kubernetes.io/egress-bandwidth": t.egress_quantity,
                            "bandwidth.cilium.io/priority": t.priority,
                        }
                    }
                }
            },
        }
        tiers.append(
            {
                # labelSelector matches the Deployment's own labels, not its pods'.
                "label_selector": ",".join(f"{k}={v}" for k, v in t.selector.items()),
                "patch": yamlio.dump(patch),
            }
        )
    name = f"{plan.names.qos}-egress-patch"
    obj = r.render(
        "kustomize-egress-component.yaml.j2",
        {"name": name, "tiers": tiers},
        KIND,
    )
    return [Emitted(f"{DIRECTORY}/kustomization.yaml", obj)]
