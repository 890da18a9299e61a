"""The failover plan: what one failover costs the network, phase by phase, against the
spec's objective.

A failover runs five phases one after the other: detect (health checks fail
``failureThreshold`` times), drain (the failed pods' requests finish), migrate
connections (clients reconnect to the takeover tier), sync weights (only if the takeover
tier is not current) and load weights (engines that reload take the new generation while
running; others warm up: they start and load it from disk). Each phase has a
duration, the bytes it moves and its peak bandwidth, with the formula that gives them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from compiler import units

HEALTH, CONNECTIONS, WEIGHTS = "health checks", "connection migration", "weight sync"


@dataclass(frozen=True)
class Inputs:
    """What the plan needs from the spec, already in base units."""

    link_bps: int
    model_bytes: int
    expected_delta: float
    takeover: str
    takeover_replicas: int
    takeover_egress_bps: int
    takeover_sync_bps: int  # the tier's egress x bandwidthShare: its QoS rate for weights
    tier_egress_bps: dict[str, int]
    sync_tiers: dict[str, int]  # tier -> replicas, for the fan-out
    sync_rates_bps: dict[str, int]
    weights: str  # current | behind | missing
    failed_replicas: int
    failure_threshold: int
    health_interval_ms: int
    health_bytes_per_second: float
    connections: int
    migration_ms: int
    migration_parallelism: int
    handshake_bytes: int
    drain_ms: int
    warmup_ms: int
    takeover_reloads: bool  # the takeover tier's engines load each generation while running
    reload_ms: int
    reload_waves: int  # the Job's waves until as many takeover pods as failed serve it
    store_egress_bps: int
    rto_ms: int | None


@dataclass(frozen=True)
class Phase:
    name: str
    seconds: float
    bytes: int
    peak_bps: float
    kind: str | None  # the traffic kind it moves (None: no network traffic)
    formula: str
    fits: str  # how its peak compares with the tier's share and the link


@dataclass(frozen=True)
class FanOut:
    """N pullers fetching a new generation from one store at once."""

    label: str
    pullers: int
    bytes_each: int
    seconds_store: float  # from the in-cluster store: its egress or the pullers' rates bind
    store_binds: bool  # the store's egress, not the pullers' rate limits, sets the time
    seconds_object_store: float  # from an object store: each puller at its own rate


@dataclass(frozen=True)
class FailoverPlan:
    phases: tuple[Phase, ...]
    seconds: float
    rto_ms: int | None
    met: bool | None  # None: no objective
    advice: tuple[str, ...]
    design_copy: dict[str, Any]  # the design's own example, per-replica copies at line rate
    fanout: tuple[FanOut, ...]

    def verdict(self) -> str:
        total = units.human_seconds(self.seconds)
        if self.rto_ms is None:
            return f"failover takes {total}; no objective set (failover.rto)"
        rto = units.prom_duration(self.rto_ms)
        if self.met:
            return f"objective met: failover takes {total}, within failover.rto {rto}"
        return f"objective missed: failover takes {total}, over failover.rto {rto}"

    def to_json(self) -> dict[str, Any]:
        return {
            "seconds": round(self.seconds, 3),
            "rto_seconds": None if self.rto_ms is None else self.rto_ms / 1000,
            "met": self.met,
            "verdict": self.verdict(),
            "advice": list(self.advice),
            "phases": [
                {
                    "name": p.name,
                    "seconds": round(p.seconds, 3),
                    "bytes": p.bytes,
                    "peakBitsPerSecond": round(p.peak_bps, 3),
                    "traffic": p.kind,
                    "formula": p.formula,
                    "fits": p.fits,
                }
                for p in self.phases
            ],
            "designCopy": self.design_copy,
            "fanOut": [
                {
                    "label": f.label,
                    "pullers": f.pullers,
                    "bytesEach": f.bytes_each,
                    "secondsFromStore": round(f.seconds_store, 3),
                    "storeEgressBinds": f.store_binds,
                    "secondsFromObjectStore": round(f.seconds_object_store, 3),
                }
                for f in self.fanout
            ],
        }


def _bits(b: float) -> str:
    return units.human_bits(b)


def _s(seconds: float) -> str:
    return units.human_seconds(seconds)


def _weights_phase(i: Inputs) -> Phase:
    per_copy = {
        "current": 0,
        "behind": int(i.model_bytes * i.expected_delta),
        "missing": i.model_bytes,
    }[i.weights]
    what = {"current": "current: nothing moves", "behind": "one generation behind: the delta",
            "missing": "missing: a full copy"}[i.weights]  # fmt: skip
    rate = min(i.takeover_sync_bps, i.link_bps)
    seconds = per_copy * 8 / rate if per_copy else 0.0
    line = per_copy * 8 / i.link_bps if per_copy else 0.0
    fits = (
        f"{_bits(rate)} is the {i.takeover} tier's share; at line rate it would take "
        f"{_s(line)} but need {_bits(i.link_bps)}, over the tier's {_bits(i.takeover_egress_bps)}"
        if per_copy
        else "no traffic"
    )
    return Phase(
        "sync weights",
        seconds,
        per_copy,
        rate if per_copy else 0.0,
        WEIGHTS if per_copy else None,
        f"{i.takeover} tier {what} = {units.human_bytes(per_copy)}, one copy on the shared "
        f"claim, at {_bits(rate)} (egress x bandwidthShare)",
        fits,
    )


def _phases(i: Inputs) -> list[Phase]:
    detect_s = i.failure_threshold * i.health_interval_ms / 1000
    migrate_s = i.connections * i.migration_ms / 1000 / i.migration_parallelism
    migrate_bytes = i.connections * i.handshake_bytes
    migrate_peak = migrate_bytes * 8 / migrate_s if migrate_s else 0.0
    health_bps = i.health_bytes_per_second * 8
    return [
        Phase(
            "detect",
            detect_s,
            int(i.health_bytes_per_second * detect_s),
            health_bps,
            HEALTH,
            f"{i.failure_threshold} failed checks x {units.prom_duration(i.health_interval_ms)}",
            f"{_bits(health_bps)}, far within the link",
        ),
        Phase(
            "drain",
            i.drain_ms / 1000,
            0,
            0.0,
            None,
            f"failover.drain {units.prom_duration(i.drain_ms)}",
            "no traffic",
        ),
        Phase(
            "migrate connections",
            migrate_s,
            migrate_bytes,
            migrate_peak,
            CONNECTIONS,
            f"{i.connections} connections x {units.prom_duration(i.migration_ms)} / "
            f"{i.migration_parallelism} at once; {units.human_bytes(i.handshake_bytes)} each",
            f"{_bits(migrate_peak)}, within the {i.takeover} tier's "
            f"{_bits(i.takeover_egress_bps)} per pod",
        ),
        _weights_phase(i),
        _load_phase(i),
    ]


def _load_phase(i: Inputs) -> Phase:
    """What the takeover tier's engines do before they serve: nothing, a reload of the new
    generation into the running engine, or a start (the warm-up)."""
    if i.takeover_reloads and i.weights != "missing":
        if i.weights == "current":
            return Phase("load weights", 0.0, 0, 0.0, None,
                         f"the {i.takeover} tier's engines reloaded the current generation after "
                         "its sync: already serving it", "no network traffic")  # fmt: skip
        waves = max(1, i.reload_waves)
        return Phase(
            "load weights",
            waves * i.reload_ms / 1000,
            0,
            0.0,
            None,
            f"reload into the running engines, {waves} wave(s) of the weight-sync Job (reload."
            f"maxUnavailable pods at a time) until {i.failed_replicas} pod(s) serve it, each "
            f"failover.reload {_s(i.reload_ms / 1000)} (default: the model at 2 GB/s, at most "
            "failover.warmup; the weight-sync Job reports the time measured)",
            "no network traffic",
        )
    why = (
        "nothing on disk to reload from: the engines start"
        if i.takeover_reloads
        else "the engines restart to load it (reload: restart)"
    )
    return Phase(
        "warm up",
        i.warmup_ms / 1000,
        0,
        0.0,
        None,
        f"failover.warmup {units.prom_duration(i.warmup_ms)} (weights from disk to memory; {why})",
        "no network traffic",
    )


def _advice(i: Inputs, phases: list[Phase], total: float) -> list[str]:
    """What to change when the objective is missed: each lever with the time it saves, then
    all of them together. A phase is "long" beyond a quarter of the objective."""
    if i.rto_ms is None or total * 1000 <= i.rto_ms:
        return []
    quarter = i.rto_ms / 4000
    by_name = {p.name: p for p in phases}
    levers: list[tuple[float, str]] = []
    migrate = by_name["migrate connections"]
    if migrate.seconds > quarter:
        serial = migrate.seconds * i.migration_parallelism
        need = math.ceil(serial / quarter)
        levers.append((
            migrate.seconds - serial / need,
            f"migrate connections in parallel: failover.migrationParallelism {need} takes "
            f"{_s(serial / need)} instead of {_s(migrate.seconds)}",
        ))  # fmt: skip
    weights = by_name["sync weights"]
    if weights.seconds > 0:
        # Current, engines that reload already serve the generation: no reload either.
        reload_s = by_name["load weights"].seconds if "load weights" in by_name else 0.0
        levers.append((
            weights.seconds + reload_s,
            f"keep the {i.takeover} tier current (weightSync.tiers includes it and its Job "
            "runs on every generation): nothing moves"
            + (" and nothing reloads" if reload_s else "")
            + f" during a failover, {_s(weights.seconds + reload_s)} less"
            + (" (a delta instead of a full copy)" if i.weights == "missing" else ""),
        ))  # fmt: skip
    detect = by_name["detect"]
    if detect.seconds > quarter:
        interval = quarter / i.failure_threshold
        levers.append((
            detect.seconds - quarter,
            f"detect sooner: healthChecks.interval {units.prom_duration(int(interval * 1000))} "
            f"finds a failure in {_s(quarter)} instead of {_s(detect.seconds)}",
        ))  # fmt: skip
    warm = by_name.get("warm up")
    if warm is not None and warm.seconds > 0 and not i.takeover_reloads and i.weights != "missing":
        instead = 0.0 if i.weights == "current" else i.reload_ms / 1000
        what = "no" if not instead else f"a {_s(instead)} reload instead of the"
        levers.append((
            warm.seconds - instead,
            f"let the {i.takeover} tier's engines load each generation while they run "
            f"(engine.reload.api sglang, vllm or triton): {what} {_s(warm.seconds)} warm-up",
        ))  # fmt: skip
    if not levers:
        return [f"shorten the longest phase, {max(phases, key=lambda p: p.seconds).name}"]
    after = total - sum(saved for saved, _ in levers)
    verdict = "meets" if after * 1000 <= i.rto_ms else "still misses"
    return [text for _, text in levers] + [
        f"with all of these the failover takes {_s(after)}, which {verdict} the objective"
    ]


def _fanout(i: Inputs) -> list[FanOut]:
    """A new generation: every puller fetches it from the one store at once."""
    tiers = list(i.sync_tiers)
    if not tiers:
        return []
    delta = int(i.model_bytes * i.expected_delta)
    slowest = min(i.sync_rates_bps[t] for t in tiers)
    egress = min(i.store_egress_bps, i.link_bps)
    replicas = sum(i.sync_tiers.values())
    out: list[FanOut] = []
    for label, pullers, each in (
        (f"one Job per sync tier ({', '.join(tiers)}), a delta each", len(tiers), delta),
        ("one Job per sync tier, a full copy each (a new standby)", len(tiers), i.model_bytes),
        (f"per-replica copies, as the design had it: {replicas} standbys, a full copy each",
         replicas, i.model_bytes),
    ):  # fmt: skip
        store_s = pullers * each * 8 / egress
        own_s = each * 8 / slowest
        out.append(FanOut(label, pullers, each, max(store_s, own_s), store_s > own_s, own_s))
    return out


def analyse(i: Inputs) -> FailoverPlan:
    phases = _phases(i)
    total = sum(p.seconds for p in phases)
    copies = i.takeover_replicas
    design_bytes = i.model_bytes * copies
    design = {
        "formula": f"{units.human_bytes(i.model_bytes)} x {copies} {i.takeover} replicas / "
        f"{_bits(i.link_bps)}",
        "bytes": design_bytes,
        "gigabits": round(design_bytes * 8 / 1e9, 2),
        "seconds": round(design_bytes * 8 / i.link_bps, 3),
    }
    met = None if i.rto_ms is None else total * 1000 <= i.rto_ms
    return FailoverPlan(
        tuple(phases),
        total,
        i.rto_ms,
        met,
        tuple(_advice(i, phases, total)),
        design,
        tuple(_fanout(i)),
    )
