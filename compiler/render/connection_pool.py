"""Connection pooling: the seed's ConfigMap and the same numbers as consumers read them.

- ``<name>-connection-pool``: the seed's ``connection-config.yaml`` (for the
  engine's own config loader) plus the ingress-nginx ConfigMap keys.
- ``<name>-grpc-channel-args``: gRPC channel args for client and server, and a
  service config, as JSON. Client keepalive and the server's minimum ping
  interval are emitted together so they cannot drift apart.
"""

from __future__ import annotations

import json
from typing import Any

from compiler import yamlio
from compiler.emitted import Emitted
from compiler.plan import Plan
from compiler.render.base import Renderer, filename

KIND = "ConfigMap"


def _seconds(ms: int) -> str:
    return f"{ms // 1000}s" if ms % 1000 == 0 else f"{ms}ms"


def _json(obj: Any) -> str:
    return json.dumps(obj, indent=2) + "\n"


def channel_args(plan: Plan) -> tuple[dict[str, int], dict[str, int]]:
    pool = plan.pool
    g = pool.grpc
    permit = int(g.permit_without_calls)
    client = {
        "grpc.keepalive_time_ms": g.keepalive_time,
        "grpc.keepalive_timeout_ms": g.keepalive_timeout,
        "grpc.keepalive_permit_without_calls": permit,
        # 0 = no cap on pings without data; idle pooled channels stay probed.
        "grpc.http2.max_pings_without_data": 0,
    }
    if g.reconnect_backoff is not None:  # unset: gRPC's own (1 s, x1.6, up to 120 s)
        client["grpc.initial_reconnect_backoff_ms"] = g.reconnect_backoff.initial
        client["grpc.max_reconnect_backoff_ms"] = g.reconnect_backoff.max
    server = {
        "grpc.max_concurrent_streams": pool.upstream.max_concurrent_streams,
        "grpc.max_connection_age_ms": g.max_connection_age,
        # Must be <= the client keepalive, or the server answers GOAWAY too_many_pings.
        "grpc.http2.min_ping_interval_without_data_ms": g.server_min_ping_interval,
        "grpc.keepalive_permit_without_calls": permit,
    }
    if g.max_connection_age_grace is not None:  # unset: gRPC's default, no limit
        server["grpc.max_connection_age_grace_ms"] = g.max_connection_age_grace
    return client, server


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    pool = plan.pool
    grpc: dict[str, object] = {
        "keepaliveTime": _seconds(pool.grpc.keepalive_time),
        "keepaliveTimeout": _seconds(pool.grpc.keepalive_timeout),
        "maxConnectionAge": _seconds(pool.grpc.max_connection_age),
        "serverMinPingInterval": _seconds(pool.grpc.server_min_ping_interval),
        "permitWithoutCalls": pool.grpc.permit_without_calls,
    }
    if pool.grpc.max_connection_age_grace is not None:  # unset: gRPC's default, no limit
        grpc["maxConnectionAgeGrace"] = _seconds(pool.grpc.max_connection_age_grace)
    seed_shape = {
        "upstream": {
            "keepalive": pool.upstream.keepalive,
            "keepaliveRequests": pool.upstream.keepalive_requests,
            "maxConcurrentStreams": pool.upstream.max_concurrent_streams,
        },
        "http2": {
            "enabled": pool.http2.enabled,
            "maxConcurrentStreams": pool.http2.max_concurrent_streams,
        },
        "grpc": grpc,
    }
    ingress_nginx = {
        "upstream-keepalive-connections": str(pool.upstream.keepalive),
        "upstream-keepalive-requests": str(pool.upstream.keepalive_requests),
        # How long ingress-nginx waits on a silent upstream (a lost node, a hung engine)
        # before it gives up on it: the plan's bound for HTTP clients. In seconds.
        "proxy-read-timeout": str(max(1, plan.read_timeout_ms // 1000)),
    }
    pool_name = plan.names.connection_pool
    pool_obj = r.render(
        "configmap-connection-pool.yaml.j2",
        {
            "name": pool_name,
            "connection_config": yamlio.dump(seed_shape),
            "ingress_nginx": yamlio.dump(ingress_nginx),
        },
        KIND,
    )
    client, server = channel_args(plan)
    service_config = {
        "loadBalancingConfig": [{"round_robin": {}}],
        # During failover a call waits for a ready standby instead of failing fast.
        "methodConfig": [{"name": [{}], "waitForReady": True}],
    }
    grpc_name = plan.names.grpc_channel_args
    grpc_obj = r.render(
        "configmap-grpc.yaml.j2",
        {
            "name": grpc_name,
            "client_args": _json(client),
            "server_args": _json(server),
            "service_config": _json(service_config),
        },
        KIND,
    )
    return [
        Emitted(filename(KIND, pool_name), pool_obj),
        Emitted(filename(KIND, grpc_name), grpc_obj),
    ]
