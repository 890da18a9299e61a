"""What the failover plan reads: the spec's numbers, each a ``Num`` with its source, and
what the compiled objects set (the clients' keepalive, timeouts and reconnect backoff)."""

from __future__ import annotations

from dataclasses import dataclass

from compiler.failover.numbers import Num, Source

MODE_TITLES = {"crash": "pod crash", "hang": "engine hang", "nodeLoss": "node loss"}


@dataclass(frozen=True)
class Probe:
    """The engine pods' readinessProbe, as the spec declares it (healthChecks)."""

    period: Num
    timeout: Num
    failure_threshold: int
    threshold_source: str  # declared | default


@dataclass(frozen=True)
class Cluster:
    """How fast the cluster takes a failed pod out of its Service (failover.cluster)."""

    container_exit: Num
    node_grace: Num
    node_period: Num
    endpoint_update: Num
    pod_eviction: Num


@dataclass(frozen=True)
class Clients:
    """What the compiled connection-pool objects make clients do."""

    protocol: str  # grpc | http
    keepalive_time: Num  # grpc: connectionPool.grpc.keepaliveTime (grpc.keepalive_time_ms)
    keepalive_timeout: Num  # grpc.keepalive_timeout_ms
    read_timeout: Num  # http: connections.readTimeout (ingress-nginx proxy-read-timeout)
    backoff_initial: Num  # the wait after a failed connection attempt (grpc)
    backoff_max: Num
    connect_timeout: Num  # how long a connection attempt to a silent address may take (grpc)
    max_connection_age: Num  # the server's GOAWAY (grpc.max_connection_age_ms)
    connections: int  # connections.expected
    handshake: Num  # bytes of one reconnect

    @property
    def silent_peer(self) -> Num:
        """How long a client stays attached to a peer that answers nothing."""
        if self.protocol == "grpc":
            where = (
                "connectionPool.grpc keepaliveTime + keepaliveTimeout, emitted as "
                "grpc.keepalive_time_ms and grpc.keepalive_timeout_ms"
            )
            seconds = self.keepalive_time.value + self.keepalive_timeout.value
            return Num(seconds, "s", _worst(self.keepalive_time, self.keepalive_timeout), where)
        return self.read_timeout


def _worst(*nums: Num) -> Source:
    """The weakest source among ``nums``: a sum is only as sure as its least sure part."""
    order: tuple[Source, ...] = ("default", "declared", "measured")
    return min((n.source for n in nums), key=order.index)


@dataclass(frozen=True)
class Takeover:
    """The tier whose standbys take over, and what lands on it."""

    tier: str
    replicas: int
    cap_bps: int  # tiers.<tier>.egress: what Cilium lets one pod send
    failed: int  # failover.failedReplicas
    serving_egress: Num  # what one failed pod sent at peak
    retried: Num  # share of its in-flight answers sent again
    weights: str  # current | behind | missing
    reloads: bool  # the tier's engines take a generation while running


@dataclass(frozen=True)
class TierRollout:
    """One sync tier, for the time from "published" to "every pod serves it"."""

    tier: str
    replicas: int
    sync_rate_bps: int  # the Job's rate limit: egress x bandwidthShare
    api: str | None  # the reload API; None: the engines restart to load it
    waves: int  # reload waves (maxUnavailable pods at a time)
    max_unavailable: int
    serves_while_loading: bool
    job_deadline_s: int  # the Job's activeDeadlineSeconds
    measured_sync: Num | None = None  # standbyc_weights_sync_duration_seconds, p95
    measured_reload: Num | None = None  # standbyc_weights_reload_duration_seconds, p95


@dataclass(frozen=True)
class Rollout:
    """What every sync tier shares in a rollout."""

    tiers: tuple[TierRollout, ...]
    delta_bytes: int  # the expected delta: model x weightSync.expectedDelta
    trigger: str  # schedule | argocdHook
    trigger_wait: Num  # the longest wait for the Job to start after a publish
    job_start: Num
    publish_rate: Num  # what the publisher writes per second
    sign_rate: Num | None  # what signing hashes per second; None: no verify, nothing signed
    receive_rate: Num  # what a sync writes and hashes of its download per second
    rebuild_rate: Num  # what a sync rebuilds the model directory at, on local disk
    place_rate: Num  # what a new standby's sync checks and swaps in a whole download at
    verify_rate: Num | None  # the signature's hash rate; None: no verify


@dataclass(frozen=True)
class Inputs:
    """Everything the plan is computed from."""

    link: Num
    model_bytes: int
    modes: tuple[str, ...]
    probe: Probe
    cluster: Cluster
    clients: Clients
    takeover: Takeover
    engine_start: Num
    claim_rate: Num  # the weights claim's rate per client, bytes/s
    reload: Num  # one running engine loading a generation, seconds
    rollout: Rollout
    store_egress_bps: int
    tiers_egress_bps: int  # every tier's replicas x egress: what the link budget holds
    standby_replicas: int  # every standby pod weight sync feeds, for the design's copies
    rto_ms: int | None

    @property
    def read_seconds(self) -> float:
        """Reading the whole model from the claim, once."""
        return self.model_bytes / self.claim_rate.value

    @property
    def warmup(self) -> float:
        """An engine starting: its own start, then the model read from the claim."""
        return self.engine_start.value + self.read_seconds
