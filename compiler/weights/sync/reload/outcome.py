"""What asking a tier's engines gave: per pod, and for the tier; and the record of it
kept beside the model directory, which the next run and the report read."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from compiler.weights.sync.reload.steps import Entry

OK, CURRENT = "loaded", "current"  # the pod serves the generation
REFUSED = "refused"  # the engine said no, or answered what success does not: old weights serve
DOWN, TIMEOUT = "unreachable", "timed out"
BROKEN = "out of service"  # weights unknown or none: left paused or unloaded
SKIPPED = "not asked"  # an earlier wave failed, the deadline came, or the Job was stopped
MISSING = "unknown"  # a pod the tier should have that no address stands for


@dataclass
class PodResult:
    address: str
    outcome: str
    message: str = ""
    seconds: float = 0.0
    wave: int | None = None  # which wave asked it to load (1-based)

    @property
    def serves(self) -> bool:
        return self.outcome in (OK, CURRENT)

    def to_json(self) -> dict[str, Any]:
        return {
            "address": self.address,
            "outcome": self.outcome,
            "message": self.message,
            "seconds": round(self.seconds, 3),
            "wave": self.wave,
        }


@dataclass
class Wave:
    pods: list[str]
    start: float  # seconds after the reload began
    seconds: float

    def to_json(self) -> dict[str, Any]:
        return {"pods": self.pods, "start": round(self.start, 3), "seconds": round(self.seconds, 3)}


@dataclass
class Outcome:
    api: str
    generation: int
    pods: list[PodResult] = field(default_factory=list)
    expected: int = 0  # the tier's replicas: fewer addresses than this leaves pods unknown
    served: int | None = None  # the generation the whole tier is known to serve
    seconds: float = 0.0
    error: str = ""  # the pods could not be found
    recorded_failed: int = 0  # ``recorded``: how many failed when they were last asked
    waves: list[Wave] = field(default_factory=list)
    journal: dict[str, Entry] = field(default_factory=dict)

    @property
    def failed(self) -> int:
        """Pods not known to serve the generation: asked and not loaded, or without an
        address (the tier has ``expected`` pods); all of them when none could be found."""
        if self.error:
            return max(self.expected, 1) + self.recorded_failed
        missing = max(0, self.expected - len(self.pods))
        return sum(not p.serves for p in self.pods) + missing + self.recorded_failed

    def to_json(self) -> dict[str, Any]:
        return {
            "api": self.api,
            "generation": self.generation,
            "served_generation": self.served,
            "pods": [p.to_json() for p in self.pods],
            "expected": self.expected,
            "confirmed": sum(p.serves for p in self.pods),
            "failed": self.failed,
            "waves": [w.to_json() for w in self.waves],
            "seconds": round(self.seconds, 3),
            "error": self.error,
        }

    def text(self) -> str:
        n = len(self.pods)
        if self.error:
            return f"error: reload ({self.api}): {self.error}"
        if not n and not self.expected:
            return (
                f"reload ({self.api}): no ready pod to ask; pods load generation "
                f"{self.generation} when they start"
            )
        total = max(n, self.expected)
        head = (
            f"reload ({self.api}): {total - self.failed} of {total} pod(s) serve generation "
            f"{self.generation} ({self.seconds:.2f} s"
            + (f", {len(self.waves)} wave(s))" if self.waves else ")")
        )
        bad = [f"{p.address} {p.outcome}: {p.message}" for p in self.pods if not p.serves]
        if self.expected > n:
            bad.append(
                f"{self.expected - n} of the tier's {self.expected} pod(s) have no ready "
                "address: what they serve is unknown"
            )
        return head if not bad else "error: " + head + "\n  " + "\n  ".join(bad)

    @classmethod
    def recorded(cls, api: str, generation: int, record: dict[str, Any]) -> Outcome:
        """What an earlier run's record says the tier serves (nobody asked this time)."""
        served, failed = record.get("generation"), record.get("failed")
        return cls(
            api,
            generation,
            served=served if type(served) is int else None,
            recorded_failed=failed if type(failed) is int and failed >= 0 else 0,
        )

    def record(self) -> dict[str, Any]:
        """What ``state.json`` keeps: per pod, the generation it confirmed; how many did
        not load it, so that a later report pushes what this run pushed; and the journal
        of pods left out of service, for the next run to undo."""
        return {
            "generation": self.served,
            "pods": {p.address: self.generation for p in self.pods if p.serves},
            "failed": self.failed,
            "journal": dict(self.journal),
        }
