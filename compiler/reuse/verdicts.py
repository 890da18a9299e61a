"""The gate's one seam to every reuse: ``GateMemo.plan(work)`` takes out of the validators'
work what a remembered pass (``compiler.reuse.store``), a run shared with another spec's
test (``compiler.reuse.identity``) or another Kubernetes version's verdict
(``compiler.reuse.shapes``) covers; ``settle(ran)`` takes what ran and says what must run
too; ``results()`` puts every verdict back in order.

A pass is remembered under a key over the exact bytes checked, the tool that checked them
(its path, size, inode and times) and the bytes of the schemas. Only passes are
remembered; anything else runs again. A shared run that fails runs each test it stood for
on its own, for its own messages. With ``STANDBYC_REUSE=off`` the plan is the work."""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar

from compiler import tools
from compiler.forkmap import fork_map
from compiler.gate import kubeconform, kyverno
from compiler.gate.files import read_documents, unreadable
from compiler.gate.promtool import Outcome, RuleSource, merge
from compiler.gate.report import FileResult, Finding, VersionResult
from compiler.gate.schemas import SchemaDir, normalize_version
from compiler.reuse import identity, shapes, store, switch

T = TypeVar("T")

# From this many tests on, their abstractions are proven in worker processes (a proof
# takes about 15 ms; starting the workers about 0.1 s).
PARALLEL_FROM = 16
# Remembered once a run kept passes under keys with the spec's names abstracted.
ABSTRACTED = "promtool-test-abstracted"

_RULE_FILES = re.compile(r"^rule_files:\n((?:[ \t]*- .*\n)+)", re.MULTILINE)
_POLICIES = re.compile(r"^policies:\n((?:[ \t]*- .*\n)+)", re.MULTILINE)


def _listed(block: re.Match[str] | None) -> list[str] | None:
    if block is None:
        return None
    items = [line.strip()[2:].strip().strip("'\"") for line in block.group(1).splitlines()]
    if any(not item or any(c in item for c in "*?[{") for item in items):
        return None  # a glob or an odd entry: do not guess what it loads
    return items


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


def documents(data: bytes) -> int:
    """How many resources kubeconform counts in a manifest (its non-empty documents)."""
    docs = re.split(r"^---[ \t]*$", data.decode("utf-8", "replace"), flags=re.MULTILINE)
    return sum(
        1
        for doc in docs
        if any(ln.strip() and not ln.lstrip().startswith("#") for ln in doc.splitlines())
    )


def schemas_key(sd: SchemaDir, versions: Sequence[str]) -> str:
    """The schemas kubeconform reads at ``versions``, by content: every file of every
    place it looks (a schema edited in place is another schema set)."""
    if not switch.enabled():
        return "-"  # nothing is remembered: spare the reading
    places = [sd.crds]
    for version in versions:
        own = sd.kubernetes / f"v{normalize_version(version)}.0"
        places.append(own)
        if sd.overlay is not None:
            places.append(sd.overlay / "kubernetes" / own.name)
    kept = store.Store("gate")
    return store.key(
        "schemas", sd.identity(), *(f"{p}:{store.stamped_tree_digest(p, kept)}" for p in places)
    )


class GateMemo:
    def __init__(
        self,
        root: Path,
        schemas: str,
        known: Mapping[str, str] | None = None,
        parsed: Mapping[str, Sequence[Any]] | None = None,
    ) -> None:
        self.on = switch.enabled()  # off: every validator runs on every input
        self.store = store.Store("gate")
        self.root = root
        # Texts of files under root, exactly as on disk, and the documents some of them
        # read back as, from the caller (off: read and parse them here).
        self.known = (known or {}) if self.on else {}
        self.parsed = (parsed or {}) if self.on else {}
        self.schemas = schemas  # identifies the schema set kubeconform validates against
        self._bytes: dict[str, bytes] = {}
        self._digests: dict[str, str] = {}
        self._documents: dict[str, int] = {}
        self._parsed_here: dict[str, list[Any] | str] = {}
        self._tools: dict[str, str] = {}
        self.reused = 0
        self._tree_key: str | None = None

    def _key(self, what: str, *parts: bytes | str) -> str:
        """A key over ``parts`` and standbyc's own code (which decides what is checked and
        how a tool's answer is read): an upgraded standbyc never finds an old pass."""
        return store.key(what, store.code_digest(), *parts)

    def read(self, rel: str) -> bytes:
        """The bytes of ``rel`` (under the root), read once per run."""
        if rel not in self._bytes:
            if (text := self.known.get(rel)) is not None:
                self._bytes[rel] = text.encode("utf-8")
                return self._bytes[rel]
            # Plain os calls, not pathlib: thousands of files per run.
            with open(os.path.join(self.root, rel), "rb") as fh:  # noqa: PTH118, PTH123
                self._bytes[rel] = fh.read()
        return self._bytes[rel]

    def digest(self, rel: str) -> str:
        """The SHA-256 of ``rel``'s bytes, once per run (every Kubernetes version asks)."""
        if rel not in self._digests:
            self._digests[rel] = hashlib.sha256(self.read(rel)).hexdigest()
        return self._digests[rel]

    def documents(self, rel: str) -> int:
        """``documents`` of ``rel``, counted once per run (every version asks)."""
        if rel not in self._documents:
            self._documents[rel] = documents(self.read(rel))
        return self._documents[rel]

    def documents_of(self, rel: str, parse: Callable[[bytes], list[Any] | str]) -> list[Any] | str:
        """The documents ``rel`` holds: as the caller gave them (it read them back from
        exactly these bytes), else ``parse`` of its bytes (once per run; a string: why
        they cannot be read)."""
        if (docs := self.parsed.get(rel)) is not None:
            return list(docs)
        if rel not in self._parsed_here:
            self._parsed_here[rel] = parse(self.read(rel))
        return self._parsed_here[rel]

    def parsed_documents(self, rel: str) -> list[Any] | str:
        """``documents_of`` with the gate's reader."""
        return self.documents_of(rel, read_documents)

    def copies_key(self, groups: list[Any], copies: Sequence[str]) -> str:
        """The key under which the test copies (relative to the root) of one
        PrometheusRule's ``groups`` were found to agree with them: the groups, and every
        copy's name and bytes."""
        parts: list[bytes | str] = [json.dumps(groups, sort_keys=True, default=str)]
        for copy in copies:
            parts += [copy, self.read(copy)]
        return self._key("rule-copies", *parts)

    def _tool(self, name: str) -> str:
        if name not in self._tools:
            found = tools.find(name)
            self._tools[name] = store.file_id(found) if found else "-"
        return self._tools[name]

    # -- keys: None when the inputs cannot be pinned down ------------------------------

    def kube_key(self, version: str, rel: str) -> str:
        return self._key("kubeconform", self._tool("kubeconform"), self.schemas, version,
                         self.digest(rel))  # fmt: skip

    def _test_files(self, rel: str) -> tuple[list[str], list[bytes]] | None:
        """The rule files a promtool test lists, and the bytes of the test and of them."""
        data = self.read(rel)
        listed = _listed(_RULE_FILES.search(data.decode("utf-8", "replace")))
        if listed is None:
            return None
        parent = Path(rel).parent
        try:
            return listed, [data, *(self.read((parent / item).as_posix()) for item in listed)]
        except OSError:
            return None

    def test_exact_key(self, rel: str) -> str | None:
        """A promtool test's key over its bytes as they are: looked up first, so a test
        seen before is not abstracted again."""
        found = self._test_files(rel)
        if found is None:
            return None
        return self._key("promtool-test-exact", self._tool("promtool"), *found[0], *found[1])

    def _may_share(self, rels: Sequence[str]) -> bool:
        """Whether keys with the spec's names abstracted can pay in this run: tests of
        another spec are here (one may be the same test but for its names), or the cache
        holds passes kept under such keys. Otherwise proving them costs about 15 ms a test
        and finds nothing: one spec's tests are never the same test as each other."""
        specs = {rel.split("/tests/", 1)[0] for rel in rels}
        return len(specs) > 1 or self.agreed(self._key(ABSTRACTED))

    def test_keys(self, rels: Sequence[str]) -> list[str | None]:
        """Each promtool test's key with its spec's names abstracted, where that is sound
        and can pay (else over its exact bytes). The proofs are independent and CPU-bound:
        with many tests they run in worker processes (``compiler.forkmap``)."""
        if not self._may_share(rels):
            return [self.test_exact_key(rel) for rel in rels]
        self.remember(self._key(ABSTRACTED))  # passes may be kept under such keys from now
        found = [self._test_files(rel) for rel in rels]
        jobs: list[identity.TestJob] = []
        for rel, f in zip(rels, found, strict=True):
            if f is not None:
                parent = Path(rel).parent
                names = [rel, *((parent / item).as_posix() for item in f[0])]
                jobs.append((rel, f[1], [self.parsed.get(r) for r in names]))
        digests = iter(fork_map(identity.abstract_digest, jobs, min_items=PARALLEL_FROM))
        keys: list[str | None] = []
        for f in found:
            if f is None:
                keys.append(None)
            elif (d := next(digests)) is not None:
                keys.append(
                    self._key("promtool-test", self._tool("promtool"), "abstract", *f[0], d)
                )
            else:
                keys.append(
                    self._key("promtool-test", self._tool("promtool"), "exact", *f[0], *f[1])
                )
        return keys

    def _kube_keys(self, version: str, manifests: Sequence[str]) -> list[str | None]:
        return [self.kube_key(version, m) for m in manifests]

    def rules_key(self, groups: list[Any]) -> str:
        text = json.dumps(groups, sort_keys=True, default=str)
        return self._key("promtool-check+pint", self._tool("promtool"), self._tool("pint"), text)

    def policy_key(self, directory: str) -> str | None:
        """Every file of a policy test directory, and the policies its test lists."""
        names: list[str] = []
        texts: list[bytes] = []
        try:
            for name in sorted(p.name for p in (self.root / directory).iterdir() if p.is_file()):
                names.append(name)
                texts.append(self.read(f"{directory}/{name}"))
            test = self.read(f"{directory}/{kyverno.TEST_FILE}")
            listed = _listed(_POLICIES.search(test.decode("utf-8", "replace")))
            if listed is None:
                return None
            for item in listed:
                names.append(item)
                texts.append(self.read((Path(directory) / item).as_posix()))
        except OSError:
            return None
        abstracted = identity.abstract(directory, texts, kyverno=True)
        if abstracted is not None:
            names = [identity.replace(directory, n.encode()).decode() for n in names]
            texts = abstracted
        form = "abstract" if abstracted is not None else "exact"
        parts: list[bytes | str] = [self._tool(kyverno.TOOL), form]
        for name, text in zip(names, texts[: len(names)], strict=True):
            parts += [name, text]
        parts += texts[len(names) :]  # what the abstraction keys on besides the texts
        return self._key("kyverno", *parts)

    def tree_key(self, prefixes: Sequence[str] | None, *context: str) -> str:
        """Every file the gate reads under ``prefixes`` (all of the root when None), with
        the tools, the schemas and ``context``: the key of a whole run's report."""
        parts: list[bytes | str] = [self.schemas, *context]
        parts += [self._tool(n) for n in ("kubeconform", "promtool", "pint", kyverno.TOOL)]
        tops = [self.root / p for p in prefixes] if prefixes is not None else [self.root]
        for top in sorted(tops):
            if top.is_file():
                rel = top.relative_to(self.root).as_posix()
                parts += [rel, self.read(rel)]
                continue
            # Plain strings, not pathlib: thousands of files per run.
            base = os.path.join(str(self.root), "")  # noqa: PTH118
            for dirpath, dirnames, filenames in os.walk(top):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                here = dirpath.removeprefix(base).replace(os.sep, "/")
                for name in sorted(filenames):
                    rel = f"{here}/{name}" if dirpath != str(self.root) else name
                    why = unreadable(os.path.join(dirpath, name))  # noqa: PTH118
                    parts += [rel, self.read(rel) if why is None else why.encode()]
        return self._key("gate-tree", *parts)

    def report_before(self, prefixes: Sequence[str] | None, *context: str) -> Any:
        """The report a run over these very files, tools and schemas remembered (None:
        none, or reuse is off); ``remember_report`` stores this run's."""
        self._tree_key = self.tree_key(prefixes, *context) if self.store.enabled else None
        return self.store.get_json(self._tree_key) if self._tree_key is not None else None

    def remember_report(self, report: dict[str, Any]) -> None:
        if (k := self._tree_key) is not None:
            self.store.put_json(k, report)

    def agreed(self, k: str) -> bool:
        """Whether ``k`` (a standbyc check of its own, not a validator's pass) was found
        to hold before."""
        return self.store.get(k) is not None

    # -- lookups ---------------------------------------------------------------------------

    def passed(self, k: str | None) -> bytes | None:
        """What was remembered with the pass (b"" for a bare pass); None: run it."""
        if k is None:
            return None
        found = self.store.get(k)
        if found is not None:
            self.reused += 1
        return found

    def remember(self, k: str | None, detail: bytes = b"") -> None:
        if k is not None:
            self.store.put(k, detail)

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
        out: Split[T] = Split(list(items))
        if not self.on:
            out.keys = out.exact = [None] * len(out.items)
            out.todo = list(items)
            return out
        out.exact = [exact(item) if exact is not None else None for item in items]
        for i, e in enumerate(out.exact):
            if (hit := self.passed(e)) is not None:
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
            hit = self.passed(k)
            if hit is not None:
                out.hits[i] = hit
                self.remember(e, hit)  # found again by its bytes, without abstracting
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
        by_file = {r.file: r for r in ran.results}
        passed = _passed(ran, more_findings)
        results: list[FileResult] = []
        for i, (item, k) in enumerate(zip(split.items, split.keys, strict=True)):
            if i in split.hits:
                results.append(FileResult(shown(item), True, split.hits[i].decode()))
                continue
            runner = shown(split.items[split.shared[i]]) if i in split.shared else None
            if runner is not None and runner in passed:
                self.reused += 1
                detail = by_file[runner].detail
                results.append(FileResult(shown(item), True, detail))
                self.remember(split.exact[i], detail.encode())
                continue
            result = by_file.get(shown(item))
            if result is None:
                continue
            results.append(result)
            if result.file in passed:
                self.remember(k, result.detail.encode())
                self.remember(split.exact[i], result.detail.encode())
        return Outcome(tuple(results), ran.findings, ran.seconds)

    # -- the seam: plan what runs, settle what ran, and the results of all -------------

    def plan(
        self,
        work: Work,
        sd: SchemaDir,
        display: Callable[[str], str],
        policy_shown: Callable[[str], str],
    ) -> Work:
        """Of ``work``, what the validators must run: the rest is a remembered pass, a run
        shared with another spec's test, or another Kubernetes version's verdict. The
        first Kubernetes version is planned here; the later ones, which need the schemas'
        shapes, come from ``later()``, which the gate calls while this work already runs
        (reading the shapes takes as long as a kubeconform run: it should not wait for
        one)."""
        self._display, self._policy_shown = display, policy_shown
        self._sd, self._versions = sd, dict(work.kube)
        self._owned = shapes.Owners()
        self._kube: dict[str, Split[str]] = {}
        self._split_kube(list(work.kube)[:1] if self.on else list(work.kube))
        self._tests = self.split(work.tests, self.test_keys, share=True, exact=self.test_exact_key)
        self._policies = self.split(
            work.policies, lambda ds: [self.policy_key(d) for d in ds], share=True
        )
        self._rules = self.split(work.rules, lambda srcs: [self.rules_key(s.groups) for s in srcs])
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
            self._sd, list(self._versions), manifests, self.parsed_documents
        )
        self._split_kube(rest)
        more = {v: self._kube[v].todo for v in rest}
        self._pending.kube.update(more)
        return more

    def _split_kube(self, versions: Sequence[str]) -> None:
        for v in versions:
            self._kube[v] = self.split(
                [m for m in self._versions[v] if (m, v) not in self._owned],
                functools.partial(self._kube_keys, v),
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
        ran = self._ran or Ran()
        kube: dict[str, kubeconform.Run] = {}
        for v, split in self._kube.items():
            reused = sum(self.documents(split.items[i]) for i in split.hits)
            run = ran.kube.get(v) or kubeconform.Run(VersionResult(v, 0, 0, 0, 0), (), 0.0)
            r = run.version
            counts = VersionResult(v, r.valid + reused, r.invalid, r.errors, r.skipped)
            kube[v] = kubeconform.Run(counts, run.findings, run.seconds)
        passed = {p: base for p, base in self._owned.extended.items() if p not in self._again}
        mirrored = shapes.mirror(kube, {**self._owned.same, **passed}, self._display,
                                 self.documents)  # fmt: skip
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
        if not self.on:
            return
        for v, run in ran.kube.items():
            failed = {f.file for f in run.findings}
            for m in self._pending.kube.get(v, []):
                if self._display(m) not in failed:
                    self.remember(self.kube_key(v, m))


EMPTY = Outcome((), (), 0.0)


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
