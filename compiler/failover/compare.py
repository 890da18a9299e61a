"""The design's claim, computed: "QoS tiers, delta sync and connection reuse cut the
failover's bandwidth peak by more than 70%". The same failover with standbyc's objects and
as the design ran it without them: per-replica copies of the whole model to every takeover
replica at line rate, no QoS cap, beside the same serving traffic and reconnects."""

from __future__ import annotations

from dataclasses import dataclass

from compiler import units
from compiler.failover.inputs import Inputs
from compiler.failover.takeover import Egress

CLAIM = 0.70  # the design's "> 70% lower failover peak"


@dataclass(frozen=True)
class Comparison:
    with_peak: float  # bit/s
    without_peak: float
    with_bytes: int  # moved by the failover besides the serving traffic itself
    without_bytes: int
    with_how: str
    without_how: str
    copies: int  # the design's per-replica copies of the model
    link: float

    @property
    def copy_seconds(self) -> float:
        """The design's copies at line rate, before protocol overhead."""
        return self.copies * 8 / self.link

    @property
    def peak_cut(self) -> float:
        return 1 - self.with_peak / self.without_peak if self.without_peak else 0.0

    @property
    def bytes_cut(self) -> float:
        return 1 - self.with_bytes / self.without_bytes if self.without_bytes else 0.0

    def verdict(self) -> str:
        holds = "holds" if self.peak_cut > CLAIM else "does not hold"
        return (
            f"peak {units.human_bits(self.with_peak)} against {units.human_bits(self.without_peak)}"
            f": {self.peak_cut:.0%} lower; bytes besides the serving traffic "
            f"{units.human_bytes(self.with_bytes)} against {units.human_bytes(self.without_bytes)}"
            f': {self.bytes_cut:.0%} fewer. The design\'s "> 70% lower peak" {holds} here'
        )


def compare(i: Inputs, e: Egress) -> Comparison:
    t = i.takeover
    model = i.model_bytes
    landing = e.burst_total
    copies = t.replicas * model
    # With standbyc: each takeover pod is held to its cap; a tier with weights syncs nothing
    # in a failover, one without fetches one copy for the tier at its weight-sync rate.
    capped = min(e.burst_per_pod, e.cap) * t.replicas
    missing = t.weights == "missing"
    sync_rate = next((r.sync_rate_bps for r in i.rollout.tiers if r.tier == t.tier), 0)
    with_peak = min(i.link.value, capped + (sync_rate if missing else 0))
    with_bytes = e.handshake_bytes + (model if missing else 0)
    without_peak = min(i.link.value, landing + i.link.value) if copies else landing
    return Comparison(
        with_peak=with_peak,
        without_peak=without_peak,
        with_bytes=with_bytes,
        without_bytes=e.handshake_bytes + copies,
        with_how=(
            f"the takeover's {units.human_bits(landing)} held to {t.replicas} x "
            f"{units.human_bits(e.cap)} (the QoS caps)"
            + (f", plus one copy for the tier at {units.human_bits(sync_rate)}" if missing else
               f"; its standbys hold weights ({t.weights}): no copy moves")
        ),
        without_how=(
            f"{t.replicas} copies of {units.human_bytes(model)} ({copies * 8 / 1e9:.2f} Gbit: "
            f"{units.human_seconds(copies * 8 / i.link.value)} at line rate, before protocol "
            f"overhead), uncapped, beside the same {units.human_bits(landing)}: the link "
            f"({units.human_bits(i.link.value)}) is full while they move"
        ),
        copies=copies,
        link=i.link.value,
    )  # fmt: skip
