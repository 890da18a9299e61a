"""Names of the objects a spec produces, derived in one place."""

from __future__ import annotations

import re

from compiler.spec import StandbySpec

MANAGED_BY = "standbyc"


def connection_pool(spec: StandbySpec) -> str:
    return f"{spec.metadata.name}-connection-pool"


def grpc_channel_args(spec: StandbySpec) -> str:
    return f"{spec.metadata.name}-grpc-channel-args"


def qos(spec: StandbySpec) -> str:
    return f"{spec.metadata.name}-qos"


def kyverno_policy(spec: StandbySpec) -> str:
    # ClusterPolicy is cluster-scoped: include the namespace so two specs never collide.
    return f"standbyc-{spec.metadata.namespace}-{spec.metadata.name}-egress"


def rules(spec: StandbySpec) -> str:
    return f"{spec.metadata.name}-failover"


def weight_sync(spec: StandbySpec, tier: str) -> str:
    return f"{spec.metadata.name}-weight-sync-{tier}"


def weight_sync_account(spec: StandbySpec) -> str:
    return f"{spec.metadata.name}-weight-sync"


def weight_source_policy(spec: StandbySpec) -> str:
    return f"{spec.metadata.name}-weight-source"


def destination_rule(spec: StandbySpec) -> str:
    return f"{spec.metadata.name}-connection-pool"


def weights_claim(spec: StandbySpec) -> str:
    return spec.spec.weight_sync.claim_name or f"{spec.metadata.name}-weights"


def all_object_names(spec: StandbySpec) -> list[str]:
    return [
        connection_pool(spec),
        grpc_channel_args(spec),
        qos(spec),
        kyverno_policy(spec),
        rules(spec),
        weight_sync_account(spec),
        weight_source_policy(spec),
        *(weight_sync(spec, t) for t in spec.spec.weight_sync.tiers),
    ]


def ksm_label(label_key: str) -> str:
    """kube-state-metrics' name for a pod label in kube_pod_labels (``label_`` + sanitised)."""
    return "label_" + re.sub(r"[^a-zA-Z0-9_]", "_", label_key)


def common_labels(spec: StandbySpec) -> dict[str, str]:
    return {
        "app.kubernetes.io/managed-by": MANAGED_BY,
        "app.kubernetes.io/part-of": spec.metadata.name,
        **spec.metadata.labels,
    }
