"""The gate's one seam to every reuse: ``GateMemo.plan(work)`` takes out of the validators'
work what a remembered pass (``compiler.reuse.store``), a run shared with another spec's
test (``compiler.reuse.identity``) or another Kubernetes version's verdict
(``compiler.reuse.shapes``) covers; ``settle(ran)`` takes what ran and says what must run
too; ``results()`` puts every verdict back in order. It is the gate's ``Reuse``
(``compiler.gate.reuse``); ``compiler.validation`` hands it to the gate.

A pass is remembered under a key over the exact bytes checked, the tool that checked them
and the bytes of the schemas (``compiler.reuse.keys``); the files and the store are read
through ``compiler.reuse.reading``. Only passes are remembered; anything else runs again.
A shared run that fails runs each test it stood for on its own, for its own messages."""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from compiler.gate import kubeconform
from compiler.gate.promtool import Outcome
from compiler.gate.report import FileResult, Finding, VersionResult
from compiler.gate.schemas import SchemaDir
from compiler.gate.work import Ran, Shown, Work
from compiler.reuse import shapes
from compiler.reuse.keys import Keys, schemas_key
from compiler.reuse.reading import Reading

T = TypeVar("T")


@dataclass
class Split(Generic[T]):
    """Items split into those to run and those whose pass was remembered."""

    items: list[T] = field(default_factory=list)
    keys: list[str | None] = field(default_factory=list)
    exact: list[str | None] = field(default_factory=list)  # over the bytes as they are
    hits: dict[int, bytes] = field(default_factory=dict)  # by position in ``items``
    todo: list[T] = field(default_factory=list)
    # position in ``items`` -> the position of the item with the same key that runs for it
    shared: dict[int, int] = field(default_factory=dict)


def _passed(ran: Outcome, more_findings: Sequence[Finding] = ()) -> set[str]:
    """The files ``ran`` passed with no finding of any tool on them."""
    flagged = {f.file for f in (*ran.findings, *more_findings)}
    return {r.file for r in ran.results if r.ok and r.file not in flagged}


class GateMemo:
    """One gate run's reuse (an ``Opener`` of ``compiler.gate.reuse`` once ``known`` and
    ``parsed`` are bound): texts of files under root exactly as on disk, and the documents
    some of them read back as, come from the caller."""

    def __init__(
        self,
        root: Path,
        sd: SchemaDir,
        versions: Sequence[str],
        known: Mapping[str, str] | None = None,
        parsed: Mapping[str, Sequence[Any]] | None = None,
    ) -> None:
        self.reading = Reading(root, known, parsed)
        # ``schemas`` identifies the schema set kubeconform validates against.
        self.keys = Keys(self.reading, schemas_key(sd, versions))
        self._tree_key: str | None = None

    # -- what the gate reads through its reuse ---------------------------------------------

    @property
    def reused(self) -> int:
        return self.reading.reused

    def read(self, rel: str) -> bytes:
        return self.reading.read(rel)

    def parsed_documents(self, rel: str) -> list[Any] | str:
        return self.reading.parsed_documents(rel)

    def copies_key(self, groups: list[Any], copies: Sequence[str]) -> str:
        return self.keys.copies_key(groups, copies)

    def agreed(self, k: str) -> bool:
        return self.reading.agreed(k)

    def remember(self, k: str | None, detail: bytes = b"") -> None:
        self.reading.remember(k, detail)

    def report_before(self, prefixes: Sequence[str] | None, *context: str) -> Any:
        """The report a run over these very files, tools and schemas remembered (None:
        none, or no store); ``remember_report`` stores this run's."""
        kept = self.reading.store
        self._tree_key = self.keys.tree_key(prefixes, *context) if kept.enabled else None
        return kept.get_json(self._tree_key) if self._tree_key is not None else None

    def remember_report(self, report: dict[str, Any]) -> None:
        if (k := self._tree_key) is not None:
            self.reading.store.put_json(k, report)

    # -- around the tools ----------------------------------------------------------------

    def split(
        self,
        items: Sequence[T],
        keys: Callable[[Sequence[T]], list[str | None]],
        *,
        share: bool = False,
        exact: Callable[[T], str | None] | None = None,
    ) -> Split[T]:
        """``items`` into remembered passes and what to run, by ``keys`` (one per item);
        ``share``: of items with the same key, only the first runs (``Split.shared``);
        ``exact``: a cheaper key looked up first (a pass is remembered under both; the
        items it finds are not given to ``keys``)."""
        passed, remember = self.reading.passed, self.reading.remember
        out: Split[T] = Split(list(items))
        out.exact = [exact(item) if exact is not None else None for item in items]
        for i, e in enumerate(out.exact):
            if (hit := passed(e)) is not None:
                out.hits[i] = hit
        rest = [i for i in range(len(items)) if i not in out.hits]
        found = dict(zip(rest, keys([items[i] for i in rest]), strict=True))
        first: dict[str, int] = {}
        for i, item in enumerate(items):
            e = out.exact[i]
            out.keys.append(found.get(i))
            if i in out.hits:
                continue
            k = found[i]
            hit = passed(k)
            if hit is not None:
                out.hits[i] = hit
                remember(e, hit)  # found again by its bytes, without abstracting
            elif share and k is not None and k in first:
                out.shared[i] = first[k]
            else:
                if k is not None:
                    first[k] = i
                out.todo.append(item)
        return out

    def unshared(self, ran: Outcome, split: Split[T], shown: Callable[[T], str]) -> list[T]:
        """The items whose shared run did not pass: they run on their own."""
        passed = _passed(ran)
        return [
            split.items[i] for i, j in split.shared.items() if shown(split.items[j]) not in passed
        ]

    def merged(
        self,
        ran: Outcome,
        split: Split[T],
        shown: Callable[[T], str],
        more_findings: Sequence[Finding] = (),
    ) -> Outcome:
        """``ran``'s results with the remembered passes put back in order; what passed now
        (no finding of any tool on it) is remembered."""
        remember = self.reading.remember
        by_file = {r.file: r for r in ran.results}
        passed = _passed(ran, more_findings)
        results: list[FileResult] = []
        for i, (item, k) in enumerate(zip(split.items, split.keys, strict=True)):
            if i in split.hits:
                results.append(FileResult(shown(item), True, split.hits[i].decode()))
                continue
            runner = shown(split.items[split.shared[i]]) if i in split.shared else None
            if runner is not None and runner in passed:
                self.reading.reused += 1
                detail = by_file[runner].detail
                results.append(FileResult(shown(item), True, detail))
                remember(split.exact[i], detail.encode())
                continue
            result = by_file.get(shown(item))
            if result is None:
                continue
            results.append(result)
            if result.file in passed:
                remember(k, result.detail.encode())
                remember(split.exact[i], result.detail.encode())
        return Outcome(tuple(results), ran.findings, ran.seconds)

    # -- the seam: plan what runs, settle what ran, and the results of all -------------

    def plan(self, work: Work, sd: SchemaDir, display: Shown, policy_shown: Shown) -> Work:
        """Of ``work``, what the validators must run: the rest is a remembered pass, a run
        shared with another spec's test, or another Kubernetes version's verdict. The
        first Kubernetes version is planned here; the later ones, which need the schemas'
        shapes, come from ``later()``, which the gate calls while this work already runs
        (reading the shapes takes as long as a kubeconform run: it should not wait for
        one)."""
        keys = self.keys
        self._display, self._policy_shown = display, policy_shown
        self._sd, self._versions = sd, dict(work.kube)
        self._owned = shapes.Owners()
        self._kube: dict[str, Split[str]] = {}
        self._split_kube(list(work.kube)[:1])
        self._tests = self.split(work.tests, keys.test_keys, share=True, exact=keys.test_exact_key)
        self._policies = self.split(
            work.policies, lambda ds: [keys.policy_key(d) for d in ds], share=True
        )
        self._rules = self.split(work.rules, lambda srcs: [keys.rules_key(s.groups) for s in srcs])
        self._ran: Ran | None = None
        self._again: set[tuple[str, str]] = set()
        self._pending = Work(
            kube={v: split.todo for v, split in self._kube.items()},
            tests=self._tests.todo,
            policies=self._policies.todo,
            rules=self._rules.todo,
        )
        return self._pending

    def unplanned(self) -> bool:
        """Whether ``later`` has versions left to plan."""
        return any(v not in self._kube for v in self._versions)

    def later(self) -> dict[str, list[str]]:
        """The manifests to validate at the later Kubernetes versions (none once planned):
        those whose schema there has a shape that lets no earlier version's verdict
        stand (``compiler.reuse.shapes``)."""
        if not self.unplanned():
            return {}
        rest = [v for v in self._versions if v not in self._kube]
        manifests = sorted({m for ms in self._versions.values() for m in ms})
        self._owned = shapes.owners(
            self._sd, list(self._versions), manifests, self.reading.parsed_documents
        )
        self._split_kube(rest)
        more = {v: self._kube[v].todo for v in rest}
        self._pending.kube.update(more)
        return more

    def _split_kube(self, versions: Sequence[str]) -> None:
        for v in versions:
            self._kube[v] = self.split(
                [m for m in self._versions[v] if (m, v) not in self._owned],
                functools.partial(self.keys.kube_keys, v),
            )

    def settle(self, ran: Ran) -> Work:
        """Take what ran; what must run too: tests whose shared run failed (each on its
        own, for its own messages), and manifests whose earlier version's schema this one
        extends where they failed there (they may use a field this version added)."""
        first = self._ran is None
        self._remember_kube(ran)
        self._ran = ran if self._ran is None else self._ran.combined(ran)
        if not first:
            self._pending = Work()
            return self._pending
        failed = {(v, f.file) for v, run in ran.kube.items() for f in run.findings}
        again: dict[str, list[str]] = {}
        for (m, v), base in sorted(self._owned.extended.items()):
            if (base, self._display(m)) in failed:
                again.setdefault(v, []).append(m)
        self._again = {(m, v) for v, ms in again.items() for m in ms}
        self._pending = Work(
            kube=again,
            tests=self.unshared(ran.tests, self._tests, self._display),
            policies=self.unshared(ran.policies, self._policies, self._policy_shown),
        )
        return self._pending

    def results(self) -> Ran:
        """Every item's result, the reused ones put back in order."""
        ran, documents = self._ran or Ran(), self.reading.documents
        kube: dict[str, kubeconform.Run] = {}
        for v, split in self._kube.items():
            reused = sum(documents(split.items[i]) for i in split.hits)
            run = ran.kube.get(v) or kubeconform.Run.nothing(v)
            r = run.version
            counts = VersionResult(v, r.valid + reused, r.invalid, r.errors, r.skipped)
            kube[v] = kubeconform.Run(counts, run.findings, run.seconds)
        passed = {p: base for p, base in self._owned.extended.items() if p not in self._again}
        mirrored = shapes.mirror(kube, {**self._owned.same, **passed}, self._display, documents)
        linted = ran.linted.findings if ran.linted else ()
        return Ran(
            kube=dict(zip(kube, mirrored, strict=True)),
            tests=self.merged(ran.tests, self._tests, self._display),
            policies=self.merged(ran.policies, self._policies, self._policy_shown),
            checked=self.merged(ran.checked, self._rules, lambda src: src.display_file, linted),
            linted=ran.linted,
        )

    def _remember_kube(self, ran: Ran) -> None:
        """The manifests kubeconform passed, remembered at their version."""
        for v, run in ran.kube.items():
            failed = {f.file for f in run.findings}
            for m in self._pending.kube.get(v, []):
                if self._display(m) not in failed:
                    self.reading.remember(self.keys.kube_key(v, m))
