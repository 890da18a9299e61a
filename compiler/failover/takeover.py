"""What a takeover sends: the failed pods' serving traffic landing on the takeover tier's
pods, plus the answers clients ask again for the requests that were in flight, against the
QoS cap each takeover pod has (Cilium enforces it per pod) and the link."""

from __future__ import annotations

from dataclasses import dataclass

from compiler import units
from compiler.failover.inputs import Inputs


@dataclass(frozen=True)
class Egress:
    tier: str
    replicas: int
    per_pod: float  # bit/s: the failed pods' traffic, spread over the takeover pods
    burst_per_pod: float  # with the retried answers on top
    cap: int  # tiers.<tier>.egress
    link: float
    handshake_bytes: int  # every client connection reconnecting once

    @property
    def total(self) -> float:
        return self.per_pod * self.replicas

    @property
    def burst_total(self) -> float:
        return self.burst_per_pod * self.replicas

    @property
    def fits(self) -> bool:
        """The takeover can carry the traffic at all."""
        return self.per_pod <= self.cap

    @property
    def burst_fits(self) -> bool:
        return self.burst_per_pod <= self.cap

    def verdict(self) -> str:
        bits = units.human_bits
        each = f"each {self.tier} pod sends {bits(self.per_pod)}"
        if not self.fits:
            return (
                f"{each}, over its {bits(self.cap)} cap (tiers.{self.tier}.egress): Cilium "
                f"holds it to the cap, so the takeover serves {self.cap / self.per_pod:.0%} of "
                "the failed pods' traffic and the rest waits"
            )
        if not self.burst_fits:
            return (
                f"{each}, within its {bits(self.cap)} cap, but {bits(self.burst_per_pod)} while "
                "the retried answers are sent again: the cap paces them, and those answers "
                "come slower"
            )
        return (
            f"{each} ({bits(self.burst_per_pod)} while the retried answers are sent again), "
            f"within its {bits(self.cap)} cap"
        )


def egress(i: Inputs) -> Egress:
    t = i.takeover
    per_pod = t.failed * t.serving_egress.value / t.replicas
    return Egress(
        tier=t.tier,
        replicas=t.replicas,
        per_pod=per_pod,
        burst_per_pod=per_pod * (1 + t.retried.value),
        cap=t.cap_bps,
        link=i.link.value,
        handshake_bytes=int(i.clients.connections * i.clients.handshake.value),
    )


def formula(i: Inputs) -> str:
    t = i.takeover
    return (
        f"{t.failed} failed pod(s) x {t.serving_egress.label()} / {t.replicas} {t.tier} pod(s); "
        f"x (1 + {t.retried.label()} retried) while the answers in flight are sent again"
    )
