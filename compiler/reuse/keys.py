"""The keys the gate's passes are remembered under: the exact bytes checked, the tool that
checked them (its path, size, inode and times), the schemas' bytes and standbyc's own code;
for promtool and Kyverno tests, where sound, with the spec's names abstracted
(``compiler.reuse.identity``) so that another spec's same test finds the pass. None: the
inputs cannot be pinned down (then the item runs)."""

from __future__ import annotations

import json
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from compiler import tools
from compiler.forkmap import fork_map
from compiler.gate import kyverno
from compiler.gate.files import unreadable
from compiler.gate.schemas import SchemaDir, normalize_version
from compiler.reuse import identity, store
from compiler.reuse.reading import Reading

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


def schemas_key(sd: SchemaDir, versions: Sequence[str]) -> str:
    """The schemas kubeconform reads at ``versions``, by content: every file of every
    place it looks (a schema edited in place is another schema set)."""
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


class Keys:
    """One gate run's keys, over the files as ``reading`` reads them and the schema set
    ``schemas`` (``schemas_key``)."""

    def __init__(self, reading: Reading, schemas: str) -> None:
        self.reading = reading
        self.schemas = schemas
        self._tools: dict[str, str] = {}

    def _key(self, what: str, *parts: bytes | str) -> str:
        """A key over ``parts`` and standbyc's own code (which decides what is checked and
        how a tool's answer is read): an upgraded standbyc never finds an old pass."""
        return store.key(what, store.code_digest(), *parts)

    def _tool(self, name: str) -> str:
        if name not in self._tools:
            self._tools[name] = tools.identity(name)
        return self._tools[name]

    def copies_key(self, groups: list[Any], copies: Sequence[str]) -> str:
        """The key under which the test copies (relative to the root) of one
        PrometheusRule's ``groups`` were found to agree with them: the groups, and every
        copy's name and bytes."""
        parts: list[bytes | str] = [json.dumps(groups, sort_keys=True, default=str)]
        for copy in copies:
            parts += [copy, self.reading.read(copy)]
        return self._key("rule-copies", *parts)

    def kube_key(self, version: str, rel: str) -> str:
        return self._key("kubeconform", self._tool("kubeconform"), self.schemas, version,
                         self.reading.digest(rel))  # fmt: skip

    def kube_keys(self, version: str, manifests: Sequence[str]) -> list[str | None]:
        return [self.kube_key(version, m) for m in manifests]

    def _test_files(self, rel: str) -> tuple[list[str], list[bytes]] | None:
        """The rule files a promtool test lists, and the bytes of the test and of them."""
        read = self.reading.read
        data = read(rel)
        listed = _listed(_RULE_FILES.search(data.decode("utf-8", "replace")))
        if listed is None:
            return None
        parent = Path(rel).parent
        try:
            return listed, [data, *(read((parent / item).as_posix()) for item in listed)]
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
        return len(specs) > 1 or self.reading.agreed(self._key(ABSTRACTED))

    def test_keys(self, rels: Sequence[str]) -> list[str | None]:
        """Each promtool test's key with its spec's names abstracted, where that is sound
        and can pay (else over its exact bytes). The proofs are independent and CPU-bound:
        with many tests they run in worker processes (``compiler.forkmap``)."""
        if not self._may_share(rels):
            return [self.test_exact_key(rel) for rel in rels]
        self.reading.remember(self._key(ABSTRACTED))  # passes may be kept so from now
        found = [self._test_files(rel) for rel in rels]
        jobs: list[identity.TestJob] = []
        for rel, f in zip(rels, found, strict=True):
            if f is not None:
                parent = Path(rel).parent
                names = [rel, *((parent / item).as_posix() for item in f[0])]
                jobs.append((rel, f[1], [self.reading.parsed.get(r) for r in names]))
        digests = iter(fork_map(identity.abstract_digest, jobs, min_items=PARALLEL_FROM))
        keys: list[str | None] = []
        promtool = self._tool("promtool")
        for f in found:
            if f is None:
                keys.append(None)
            elif (d := next(digests)) is not None:
                keys.append(self._key("promtool-test", promtool, "abstract", *f[0], d))
            else:
                keys.append(self._key("promtool-test", promtool, "exact", *f[0], *f[1]))
        return keys

    def rules_key(self, groups: list[Any]) -> str:
        text = json.dumps(groups, sort_keys=True, default=str)
        return self._key("promtool-check+pint", self._tool("promtool"), self._tool("pint"), text)

    def policy_key(self, directory: str) -> str | None:
        """Every file of a policy test directory, and the policies its test lists."""
        read = self.reading.read
        names: list[str] = []
        texts: list[bytes] = []
        try:
            root = self.reading.root
            for name in sorted(p.name for p in (root / directory).iterdir() if p.is_file()):
                names.append(name)
                texts.append(read(f"{directory}/{name}"))
            test = read(f"{directory}/{kyverno.TEST_FILE}")
            listed = _listed(_POLICIES.search(test.decode("utf-8", "replace")))
            if listed is None:
                return None
            for item in listed:
                names.append(item)
                texts.append(read((Path(directory) / item).as_posix()))
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
        root, read = self.reading.root, self.reading.read
        parts: list[bytes | str] = [self.schemas, *context]
        parts += [self._tool(n) for n in ("kubeconform", "promtool", "pint", kyverno.TOOL)]
        tops = [root / p for p in prefixes] if prefixes is not None else [root]
        for top in sorted(tops):
            if top.is_file():
                rel = top.relative_to(root).as_posix()
                parts += [rel, read(rel)]
                continue
            # Plain strings, not pathlib: thousands of files per run.
            base = os.path.join(str(root), "")  # noqa: PTH118
            for dirpath, dirnames, filenames in os.walk(top):
                dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
                here = dirpath.removeprefix(base).replace(os.sep, "/")
                for name in sorted(filenames):
                    rel = f"{here}/{name}" if dirpath != str(root) else name
                    why = unreadable(os.path.join(dirpath, name))  # noqa: PTH118
                    parts += [rel, read(rel) if why is None else why.encode()]
        return self._key("gate-tree", *parts)
