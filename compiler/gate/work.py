"""The gate's work and what its validators gave for it.

``Work`` is what the gate asks its validators to check (manifests per Kubernetes version,
promtool unit tests, Kyverno test directories, PrometheusRules); ``Ran`` is what they gave.
A reuse (``compiler.gate.reuse``) takes work out before the tools run and puts the
verdicts it stands for back after, in these terms.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from compiler.gate import kubeconform
from compiler.gate.promtool import Outcome, RuleSource, merge

T = TypeVar("T")

EMPTY = Outcome((), (), 0.0)

Shown = Callable[[str], str]  # how a file or directory under the root is shown


@dataclass
class Work:
    """What the gate asks its validators to check."""

    kube: dict[str, list[str]] = field(default_factory=dict)  # version -> manifests
    tests: list[str] = field(default_factory=list)  # promtool unit test files
    policies: list[str] = field(default_factory=list)  # Kyverno test directories
    rules: list[RuleSource] = field(default_factory=list)  # PrometheusRules

    def empty(self) -> bool:
        return not (any(self.kube.values()) or self.tests or self.policies or self.rules)


@dataclass(frozen=True)
class Ran:
    """What the validators gave for a ``Work``."""

    kube: dict[str, kubeconform.Run] = field(default_factory=dict)
    tests: Outcome = EMPTY
    policies: Outcome = EMPTY
    checked: Outcome = EMPTY  # promtool check rules
    linted: Outcome | None = None  # pint (None: not run)

    def combined(self, more: Ran) -> Ran:
        kube = dict(self.kube)
        for v, run in more.kube.items():
            kube[v] = kubeconform.combine(kube[v], run) if v in kube else run
        return Ran(
            kube=kube,
            tests=merge([self.tests, more.tests]),
            policies=merge([self.policies, more.policies]),
            checked=merge([self.checked, more.checked]),
            linted=self.linted,
        )


def in_order(ran: Outcome, items: Sequence[T], shown: Callable[[T], str]) -> Outcome:
    """``ran``'s results in the order of ``items`` (one per item that has one)."""
    by_file = {r.file: r for r in ran.results}
    results = tuple(r for item in items if (r := by_file.get(shown(item))) is not None)
    return Outcome(results, ran.findings, ran.seconds)
