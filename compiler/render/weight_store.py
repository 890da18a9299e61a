"""The in-cluster store, when ``weightSync.store.url`` is not set: a static file server
(Deployment) over the store claim, its Service (the Jobs' ``--source``), and a
NetworkPolicy that lets only this spec's weight-sync pods reach it."""

from __future__ import annotations

from compiler.emitted import Emitted
from compiler.plan import Plan
from compiler.render.base import Renderer, filename

# Istio ambient (https://istio.io/latest/docs/ambient/usage/networkpolicy/): ztunnel
# delivers mesh traffic to a pod on the HBONE port, and the kubelet's probes arrive SNATed
# from a fixed link-local address. The mode decides, not ``istio.enabled`` (which only
# emits the DestinationRule): a namespace in the ambient mesh gets both either way.
HBONE_PORT = 15008
AMBIENT_PROBE_SOURCE = "169.254.7.127/32"


def _ambient(plan: Plan) -> bool:
    return plan.pool.istio.mode == "ambient"


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    store = plan.sync.store
    if store.claim is None or not plan.sync.tiers:
        return []
    name, selector = store.name, store.pod_labels
    deployment = r.render(
        "deployment-weight-store.yaml.j2",
        {
            "name": name,
            "selector": selector,
            "pod_labels": {**plan.labels, **selector},
            "image": store.image,
            "port": store.port,
            "claim": store.claim,
        },
        "Deployment",
    )
    service = r.render(
        "service.yaml.j2", {"name": name, "selector": selector, "port": store.port}, "Service"
    )
    policy = r.render(
        "networkpolicy.yaml.j2",
        {
            "name": name,
            "selector": selector,
            "from_selector": plan.sync.pod_labels,
            "ports": [store.port, *([HBONE_PORT] if _ambient(plan) else [])],
            "probe_sources": [AMBIENT_PROBE_SOURCE] if _ambient(plan) else [],
            "probe_port": store.port,
        },
        "NetworkPolicy",
    )
    return [
        Emitted(filename("Deployment", name), deployment),
        Emitted(filename("Service", name), service),
        Emitted(filename("NetworkPolicy", name), policy),
    ]
