"""A number of the plan with where it comes from: measured on the cluster, declared in the
spec, or a default (and whose default). Every input of the plan is one, so PLAN.md can say
of each figure what it rests on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from compiler import units

Source = Literal["measured", "declared", "default"]
Unit = Literal["s", "bit/s", "B", "B/s", "share"]


@dataclass(frozen=True)
class Num:
    value: float  # in base units: seconds, bit/s, bytes, bytes/s, or a share (1.0 = 100%)
    unit: Unit
    source: Source
    where: str  # the spec field, the query it was measured with, or whose default it is

    def text(self) -> str:
        if self.unit == "s":
            return units.human_seconds(self.value)
        if self.unit == "bit/s":
            return units.human_bits(self.value)
        if self.unit == "B":
            return units.human_bytes(self.value)
        if self.unit == "B/s":
            return f"{units.human_bytes(self.value)}/s"
        return f"{self.value * 100:g}%"

    def label(self) -> str:
        """``10.00 s (declared: healthChecks.interval)``."""
        return f"{self.text()} ({self.source}: {self.where})"

    def to_json(self) -> dict[str, object]:
        return {"value": self.value, "unit": self.unit, "source": self.source,
                "where": self.where}  # fmt: skip


def declared_or_default(value: float, unit: Unit, field: str, written: bool, default: str) -> Num:
    """A spec field: declared when the spec writes it, else the default it stands for."""
    if written:
        return Num(float(value), unit, "declared", field)
    return Num(float(value), unit, "default", default)


@dataclass(frozen=True)
class Step:
    """One step of a timeline: done ``at`` seconds after it starts."""

    name: str
    at: float
    how: str  # the formula, each number with its source
