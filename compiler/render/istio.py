"""Optional Istio DestinationRule carrying the connection-pool settings."""

from __future__ import annotations

from compiler.emitted import Emitted
from compiler.plan import Plan
from compiler.render.base import Renderer, filename

KIND = "DestinationRule"


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    pool = plan.pool
    if not pool.istio.enabled:
        return []
    name = plan.names.destination_rule
    context = {
        "name": name,
        "host": pool.istio.host or f"{plan.name}.{plan.namespace}.svc.cluster.local",
        "max_connections": plan.expected_connections,
        "max_connection_duration": f"{pool.grpc.max_connection_age // 1000}s",
        "h2_upgrade_policy": "UPGRADE" if pool.http2.enabled else "DO_NOT_UPGRADE",
        "max_requests_per_connection": pool.upstream.keepalive_requests,
        "max_concurrent_streams": pool.http2.max_concurrent_streams,
    }
    obj = r.render("destinationrule.yaml.j2", context, KIND)
    return [Emitted(filename(KIND, name), obj)]
