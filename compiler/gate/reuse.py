"""What the gate asks of a reuse of earlier work, and the plain answer: recompute all.

The gate (``compiler.gate.run_gate``) is a plain validator. Whoever starts it hands it an
``Opener``: called with the tree, the schemas and the Kubernetes versions of one run, it
gives that run's ``Reuse``, through which the gate reads the tree's files and which takes
out of the validators' work what earlier work settled (``plan``, ``later``, ``settle``) and
puts those verdicts back (``results``). ``Recompute`` is the plain one: every validator
runs on every input, every file is read from disk, nothing is remembered. The one that
reuses is ``compiler.reuse.verdicts.GateMemo``; ``compiler.validation`` picks one of the
two (``STANDBYC_REUSE=off``: this one).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

from compiler.gate import kubeconform
from compiler.gate.files import read_documents
from compiler.gate.schemas import SchemaDir
from compiler.gate.work import Ran, Shown, Work, in_order


class Reuse(Protocol):
    """One gate run's reuse."""

    @property
    def reused(self) -> int:
        """How many verdicts were put back without a tool run."""
        ...

    def report_before(self, prefixes: Sequence[str] | None, *context: str) -> Any:
        """A whole report remembered for these files and ``context`` (None: none)."""
        ...

    def remember_report(self, report: dict[str, Any]) -> None: ...

    def read(self, rel: str) -> bytes:
        """The bytes of ``rel`` (under the root), read once per run."""
        ...

    def parsed_documents(self, rel: str) -> list[Any] | str:
        """The documents ``rel`` holds (a string: why they cannot be read)."""
        ...

    def copies_key(self, groups: list[Any], copies: Sequence[str]) -> str:
        """The key of one PrometheusRule's groups and its test copies found to agree."""
        ...

    def agreed(self, k: str) -> bool:
        """Whether ``k`` (a check of standbyc's own) was found to hold before."""
        ...

    def remember(self, k: str | None, detail: bytes = b"") -> None: ...

    def plan(self, work: Work, sd: SchemaDir, display: Shown, policy_shown: Shown) -> Work:
        """Of ``work``, what the validators must run (at the first version, at least)."""
        ...

    def unplanned(self) -> bool:
        """Whether ``later`` has versions left to plan."""
        ...

    def later(self) -> dict[str, list[str]]:
        """The manifests to validate at the versions ``plan`` left (none once planned)."""
        ...

    def settle(self, ran: Ran) -> Work:
        """Take what ran; what must run too."""
        ...

    def results(self) -> Ran:
        """Every item's result, the reused ones put back in order."""
        ...


class Opener(Protocol):
    """Gives one gate run its reuse: the tree, its schemas and its Kubernetes versions."""

    def __call__(self, root: Path, sd: SchemaDir, versions: Sequence[str]) -> Reuse: ...


class Recompute:
    """No reuse: the plan is the work, every file is read from disk (once per run) and
    nothing is remembered. An ``Opener`` itself."""

    def __init__(self, root: Path, sd: SchemaDir, versions: Sequence[str]) -> None:
        del sd, versions  # nothing is keyed on them
        self.root = root
        self.reused = 0
        self._bytes: dict[str, bytes] = {}
        self._parsed: dict[str, list[Any] | str] = {}
        self._work = Work()
        self._ran: Ran | None = None
        self._display: Shown = str
        self._policy_shown: Shown = str

    def report_before(self, prefixes: Sequence[str] | None, *context: str) -> Any:
        return None

    def remember_report(self, report: dict[str, Any]) -> None:
        pass

    def read(self, rel: str) -> bytes:
        if rel not in self._bytes:
            self._bytes[rel] = (self.root / rel).read_bytes()
        return self._bytes[rel]

    def parsed_documents(self, rel: str) -> list[Any] | str:
        if rel not in self._parsed:
            self._parsed[rel] = read_documents(self.read(rel))
        return self._parsed[rel]

    def copies_key(self, groups: list[Any], copies: Sequence[str]) -> str:
        return ""

    def agreed(self, k: str) -> bool:
        return False

    def remember(self, k: str | None, detail: bytes = b"") -> None:
        pass

    def plan(self, work: Work, sd: SchemaDir, display: Shown, policy_shown: Shown) -> Work:
        self._work, self._display, self._policy_shown = work, display, policy_shown
        return work

    def unplanned(self) -> bool:
        return False

    def later(self) -> dict[str, list[str]]:
        return {}

    def settle(self, ran: Ran) -> Work:
        self._ran = ran if self._ran is None else self._ran.combined(ran)
        return Work()

    def results(self) -> Ran:
        ran, work = self._ran or Ran(), self._work
        return Ran(
            kube={v: ran.kube.get(v) or kubeconform.Run.nothing(v) for v in work.kube},
            tests=in_order(ran.tests, work.tests, self._display),
            policies=in_order(ran.policies, work.policies, self._policy_shown),
            checked=in_order(ran.checked, work.rules, lambda src: src.display_file),
            linted=ran.linted,
        )
