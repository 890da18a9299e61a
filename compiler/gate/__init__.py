"""The validation gate: kubeconform, promtool, pint and kyverno over a tree laid out like
``out/``.

``run_gate`` is what ``standbyc validate``, ``standbyc compile`` and the pre-commit
hook all run (through ``compiler.validation``). Every tool runs as few processes as
possible (one kubeconform per Kubernetes version over all files, one ``promtool check
rules``, one ``promtool test rules``, one pint), and those processes run concurrently.
What earlier work already settled is taken out through one seam, the ``Reuse`` its caller
hands it (``compiler.gate.reuse``: ``plan`` and ``settle``); ``Recompute``, the plain one,
runs every validator on every input.
"""

from __future__ import annotations

import os
import resource
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from compiler import tools
from compiler.errors import ToolMissing
from compiler.gate import apiserver as dryrun
from compiler.gate import copies, kubeconform, kyverno, pint, promtool, schemas
from compiler.gate.files import unreadable
from compiler.gate.report import WARNING, FileResult, Finding, Report, VersionResult
from compiler.gate.reuse import Opener, Recompute, Reuse
from compiler.gate.schemas import SchemasMissing, default_schema_dir
from compiler.gate.work import EMPTY, Ran, Work

__all__ = [
    "DEFAULT_KUBE_VERSIONS",
    "FileResult",
    "Finding",
    "Opener",
    "Recompute",
    "Report",
    "SchemasMissing",
    "VersionResult",
    "default_schema_dir",
    "discover",
    "run_gate",
    "spec_prefixes",
]

DEFAULT_KUBE_VERSIONS: tuple[str, ...] = schemas.default_kube_versions()

_T = TypeVar("_T")


def _is_yaml(path: Path) -> bool:
    return path.suffix in (".yaml", ".yml")


def discover(root: Path) -> tuple[list[str], list[str], list[str], list[tuple[str, str]]]:
    """(manifest files, promtool test files, kyverno test directories, YAML files left
    out and why), sorted, relative to ``root``, in one walk.

    Manifests: every YAML file except ``kustomization.yaml`` and anything under a
    ``tests/`` directory or a hidden directory. Tests: ``tests/**/*.test.yaml``. Kyverno
    tests: the directories holding a ``kyverno-test.yaml``. A YAML file that is not a
    regular file of at most ``FILE_CAP`` bytes is left out, and named.
    """
    manifests: list[str] = []
    tests: list[str] = []
    policy_tests: list[str] = []
    skipped: list[tuple[str, str]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel_dir = Path(dirpath).relative_to(root)
        in_tests = "tests" in rel_dir.parts
        if kyverno.TEST_FILE in filenames:
            policy_tests.append(rel_dir.as_posix())
        for fname in sorted(filenames):
            path = rel_dir / fname
            if not _is_yaml(path):
                continue
            if (why := unreadable(os.path.join(dirpath, fname))) is not None:  # noqa: PTH118
                skipped.append((path.as_posix(), why))
                continue
            if in_tests:
                if fname.endswith((".test.yaml", ".test.yml")):
                    tests.append(path.as_posix())
            elif path.stem != "kustomization":
                manifests.append(path.as_posix())
    return manifests, tests, sorted(policy_tests), skipped


def spec_prefixes(paths: Sequence[str]) -> set[str]:
    """The unit each changed path belongs to: ``<ns>/<name>`` for files of one spec (its
    manifests, rules and tests go together), else the top directory or the file itself."""
    prefixes: set[str] = set()
    for raw in paths:
        parts = Path(raw).parts
        depth = 2 if len(parts) >= 3 else 1
        prefixes.add(Path(*parts[:depth]).as_posix())
    return prefixes


def _targets(
    root: Path, only: Sequence[str] | None
) -> tuple[list[str], list[str], list[str], list[tuple[str, str]]]:
    """(manifests, promtool test files, kyverno test directories, skipped) to validate."""
    manifests, tests, policy_tests, skipped = discover(root)
    if only is None:
        return manifests, tests, policy_tests, skipped
    prefixes = spec_prefixes(only)
    return (
        [m for m in manifests if _under(m, prefixes)],
        [t for t in tests if _under(t, prefixes)],
        [d for d in policy_tests if _under(d, prefixes)],
        [s for s in skipped if _under(s[0], prefixes)],
    )


def _under(rel: str, prefixes: set[str]) -> bool:
    """Whether ``rel`` is one of ``prefixes`` or lies under one (a set lookup per leading
    part: thousands of files against hundreds of spec directories)."""
    parts = rel.split("/")
    return any("/".join(parts[:n]) in prefixes for n in range(1, len(parts) + 1))


def _rule_sources(
    manifests: Sequence[str], display: Callable[[str], str], memo: Reuse
) -> tuple[list[promtool.RuleSource], list[Finding]]:
    """Every PrometheusRule in the manifests, found by parsing each of them (never by a
    pattern: an alias or an escape may spell the kind), and a finding for each manifest
    that cannot be read to look."""
    sources: list[promtool.RuleSource] = []
    unread: list[Finding] = []
    for rel in manifests:
        docs = memo.parsed_documents(rel)
        if isinstance(docs, str):
            unread.append(
                Finding(display(rel), "", "", "", f"cannot be read to find PrometheusRules in "
                        f"it: {docs}", "standbyc")
            )  # fmt: skip
            continue
        found = _rule_docs(docs)
        for i, (name, groups) in enumerate(found):
            if groups is None:
                continue  # kubeconform reports the missing/mistyped field
            suffix = f".{i}" if len(found) > 1 else ""
            plain = f"{Path(rel).with_suffix('').as_posix()}{suffix}.rules.yaml"
            sources.append(promtool.RuleSource(display(rel), name, groups, plain, rel))
    return sources, unread


def _rule_docs(docs: Sequence[Any]) -> list[tuple[str, list[Any] | None]]:
    """Each PrometheusRule document: its name and ``spec.groups`` (None when that is not
    a list)."""
    out: list[tuple[str, list[Any] | None]] = []
    for doc in docs:
        if not isinstance(doc, dict) or doc.get("kind") != "PrometheusRule":
            continue
        spec = doc.get("spec") or {}
        groups = spec.get("groups") if isinstance(spec, dict) else None
        name = str((doc.get("metadata") or {}).get("name", ""))
        out.append((name, groups if isinstance(groups, list) else None))
    return out


def _merge_versions(findings: Sequence[Finding]) -> list[Finding]:
    """One finding per problem, listing the Kubernetes versions that reported it."""
    merged: dict[tuple[str, str, str, str, str], list[str]] = {}
    order: list[Finding] = []
    for f in findings:
        key = (f.file, f.kind, f.name, f.pointer, f.message)
        if key not in merged:
            merged[key] = []
            order.append(f)
        merged[key].extend(f.kube_versions)
    out: list[Finding] = []
    for f in order:
        versions = merged[(f.file, f.kind, f.name, f.pointer, f.message)]
        ordered = tuple(sorted(set(versions), key=lambda v: tuple(int(p) for p in v.split("."))))
        out.append(
            Finding(f.file, f.kind, f.name, f.pointer, f.message, f.tool, f.severity, ordered)
        )
    return out


def run_gate(
    root: Path,
    *,
    reuse: Opener,
    kube_versions: Sequence[str] | None = None,
    schema_dir: Path | None = None,
    display_root: str | None = None,
    only: Sequence[str] | None = None,
    apiserver: bool | None = None,
) -> Report:
    """Validate every manifest, PrometheusRule and promtool unit test under ``root``.

    ``only`` limits the run to the spec directories holding these paths (relative to
    ``root``; see ``spec_prefixes``), so a pre-commit run over one changed spec stays fast.
    ``reuse``: opens this run's reuse of earlier work (``compiler.gate.reuse``; ``Recompute``:
    none), through which every file is read. ``apiserver``:
    also dry-run every object on a real kube-apiserver (``compiler.gate.apiserver``; None:
    as ``STANDBYC_APISERVER`` says).

    Raises ``ToolMissing`` when kubeconform or promtool is absent (pint is optional) and
    ``SchemasMissing`` when the offline schemas are absent and cannot be built offline.
    Findings do not raise: check ``Report.ok``.
    """
    started = time.perf_counter()
    cpu_started, children_started = time.process_time(), _children_cpu()
    root = Path(root)
    versions = tuple(schemas.normalize_version(v) for v in (kube_versions or DEFAULT_KUBE_VERSIONS))
    shown_root = str(root) if display_root is None else display_root.rstrip("/")

    # Fail fast, before any work, on what the user must install.
    tools.require("kubeconform")
    tools.require("promtool")
    have_pint = tools.find("pint") is not None
    have_kyverno = tools.find(kyverno.TOOL) is not None
    use_apiserver = dryrun.asked(apiserver)
    if use_apiserver and (absent := dryrun.missing()):
        # Asked for and not there: an error, so a CI that lost its tools does not pass.
        raise ToolMissing(
            f"--apiserver asked, but {', '.join(absent)} not installed; install: "
            f"{tools.install_hint(dryrun.TOOL)}"
        )
    sd = schemas.ensure(schema_dir or default_schema_dir(), versions)

    # A whole tree's report remembered from a run over the same bytes with the same
    # tools and schemas stands; else each file's verdict is looked up.
    memo = reuse(root, sd, versions)
    prefixes = sorted(spec_prefixes(only)) if only is not None else None
    seen = memo.report_before(
        prefixes, shown_root, ",".join(versions), *([dryrun.identity()] if use_apiserver else [])
    )
    if isinstance(seen, dict):
        try:
            again = Report.from_dict(seen)
        except (KeyError, TypeError):  # a damaged entry: validate
            again = None
        if again is not None and again.ok:
            counted = len(again.rule_checks) + len(again.rule_tests) + len(again.policy_tests)
            reused = counted + again.resource_files * len(versions)
            wall = time.perf_counter() - started
            return replace(again, reused=reused, tool_seconds={}, wall_seconds=wall)
    manifests, tests, policy_tests, skipped = _targets(root, only)
    setup = _Setup(root, versions, shown_root, sd, manifests, tests, policy_tests,
                   have_pint, have_kyverno, memo, use_apiserver)  # fmt: skip
    report = _validate(setup, started, cpu_started, children_started)
    if skipped:
        left_out = tuple(
            Finding(setup.display(rel), "", "", "", f"not validated: {why}", "standbyc",
                    severity=WARNING)
            for rel, why in skipped
        )  # fmt: skip
        report = replace(report, findings=(*left_out, *report.findings))
    if report.ok and not report.findings:
        memo.remember_report(report.to_dict())
    return report


@dataclass(frozen=True)
class _Setup:
    """What ``run_gate`` found before any tool runs."""

    root: Path
    versions: tuple[str, ...]
    shown_root: str
    sd: schemas.SchemaDir
    manifests: list[str]
    tests: list[str]
    policy_tests: list[str]
    have_pint: bool
    have_kyverno: bool
    memo: Reuse
    apiserver: bool = False

    def display(self, rel: str) -> str:
        return f"{self.shown_root}/{rel}" if self.shown_root else rel

    def policy_shown(self, directory: str) -> str:
        return self.display(f"{directory}/{kyverno.TEST_FILE}")


def _validate(setup: _Setup, started: float, cpu_started: float, children_started: float) -> Report:
    """Every validator over the tree: a plain validator, with what the reuse says need not
    run taken out, and its verdicts put back."""
    memo, display = setup.memo, setup.display
    sources, unread = _rule_sources(setup.manifests, display, memo)
    work = Work(
        kube={v: list(setup.manifests) for v in setup.versions} if setup.manifests else {},
        tests=list(setup.tests),
        policies=list(setup.policy_tests) if setup.have_kyverno else [],
        rules=sources,
    )
    waited = 0.0  # time this thread spent blocked on tool processes
    with (
        tempfile.TemporaryDirectory(prefix="standbyc-validate-") as tmp,
        ThreadPoolExecutor(max_workers=1) as side,
    ):
        # The API server, when asked, judges every object beside the other validators.
        served = side.submit(dryrun.gate_step, setup, display) if setup.apiserver else None
        try:
            todo = memo.plan(work, setup.sd, display, setup.policy_shown)
            while not todo.empty() or memo.unplanned():
                ran, seconds = _run_tools(setup, todo, Path(tmp))
                waited += seconds
                todo = memo.settle(ran)
            t0 = time.perf_counter()
            dry, dry_status = _result(served) if served is not None else (EMPTY, "")
            waited += time.perf_counter() - t0
        except BaseException:
            # Ctrl-C, SIGTERM or a failure here: the API server step ends now (its servers
            # killed), before the pool waits for it, and cleans up behind itself.
            dryrun.stop()
            raise
    ran = memo.results()
    kube_results = [ran.kube[v] for v in setup.versions if v in ran.kube]
    kube_findings = _merge_versions([f for r in kube_results for f in r.findings])
    findings = [*kube_findings, *unread, *ran.checked.findings]
    if ran.linted is not None:
        findings += ran.linted.findings
    findings += ran.tests.findings
    findings += ran.policies.findings
    findings += _merge_versions(dry.findings)
    findings += copies.stale_test_rules(setup.root, sources, display, memo)
    tool_seconds = {
        "kubeconform": sum(r.seconds for r in kube_results),
        "promtool": ran.checked.seconds + ran.tests.seconds,
        "pint": ran.linted.seconds if ran.linted else 0.0,
        "kyverno": ran.policies.seconds,
        **({dryrun.TOOL: dry.seconds} if setup.apiserver else {}),
    }
    return Report(
        root=setup.shown_root or ".",
        kube_versions=setup.versions,
        resource_files=len(setup.manifests),
        findings=tuple(findings),
        versions=tuple(r.version for r in kube_results),
        rule_checks=ran.checked.results,
        rule_tests=ran.tests.results,
        pint=_pint_status(setup.have_pint, sources),
        policy_tests=ran.policies.results,
        kyverno=_kyverno_status(setup.have_kyverno, setup.policy_tests),
        apiserver=dry_status,
        tool_seconds=tool_seconds,
        tools_wall_seconds=waited,
        reused=memo.reused,
        own_cpu_seconds=time.process_time() - cpu_started,
        tools_cpu_seconds=_children_cpu() - children_started,
        wall_seconds=time.perf_counter() - started,
    )


def _result(future: Future[_T]) -> _T:
    """``future.result()``, waking every half second: a signal (Ctrl-C, SIGTERM) may be
    taken by any thread, and the main thread, which alone raises for it, runs its handler
    only once it wakes; a wait on a lock alone would not wake for it."""
    while not future.done():
        wait_futures([future], timeout=0.5)
    return future.result()


def _run_tools(setup: _Setup, todo: Work, tmp: Path) -> tuple[Ran, float]:
    """Every validator over ``todo``, concurrently: one kubeconform per Kubernetes version,
    promtool's unit tests in batches (one process per core), Kyverno, and promtool check
    rules then pint; and kubeconform at the versions the reuse layer plans while those
    run (``memo.later``). Also the time this thread waited for them."""
    root, display, cores = setup.root, setup.display, os.cpu_count() or 1
    versions = [v for v, ms in todo.kube.items() if ms]
    workers = max(1, cores // len(setup.versions))
    batches = _batches(todo.tests, cores, min_size=25) if todo.tests else []
    waited = 0.0

    def wait(future: Future[_T]) -> _T:
        nonlocal waited
        t0 = time.perf_counter()
        try:
            return _result(future)
        finally:
            waited += time.perf_counter() - t0

    def validate(version: str, manifests: list[str]) -> Future[kubeconform.Run]:
        return pool.submit(kubeconform.run, setup.sd, version, manifests, cwd=root,
                           display_root=setup.shown_root, workers=workers)  # fmt: skip

    with ThreadPoolExecutor(max_workers=len(setup.versions) + len(batches) + 2) as pool:
        kube = {v: validate(v, todo.kube[v]) for v in versions}
        tested = [
            pool.submit(promtool.test_rules, batch, cwd=root, display=display) for batch in batches
        ]
        policies = (
            pool.submit(kyverno.run, todo.policies, cwd=root, display=display)
            if todo.policies
            else None
        )
        checked = (
            pool.submit(_check_then_lint, todo.rules, tmp, setup.have_pint) if todo.rules else None
        )
        # Here, while the tools above run: which manifests the later versions validate.
        kube.update({v: validate(v, ms) for v, ms in setup.memo.later().items() if ms})
        rules = wait(checked) if checked is not None else (EMPTY, None)
        ran = Ran(
            kube={v: wait(f) for v, f in kube.items()},
            tests=promtool.merge([wait(f) for f in tested]),
            policies=wait(policies) if policies is not None else EMPTY,
            checked=rules[0],
            linted=rules[1],
        )
    return ran, waited


def _batches(items: Sequence[str], most: int, *, min_size: int) -> list[list[str]]:
    """At most ``most`` contiguous batches of at least ``min_size`` items (one if few)."""
    if not items:
        return [[]]
    count = max(1, min(most, len(items) // min_size))
    size = -(-len(items) // count)
    return [list(items[i : i + size]) for i in range(0, len(items), size)]


def _children_cpu() -> float:
    """CPU seconds used by finished child processes (the tools) of this process."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _check_then_lint(
    sources: Sequence[promtool.RuleSource], tmp: Path, have_pint: bool
) -> tuple[promtool.Outcome, promtool.Outcome | None]:
    # pint reads the plain rules files that check_rules writes, so it runs after it.
    checked = promtool.check_rules(sources, tmp)
    linted = pint.lint(sources, tmp) if have_pint and sources else None
    return checked, linted


def _kyverno_status(have: bool, dirs: Sequence[str]) -> str:
    if not dirs:
        return "no policy tests"
    if not have:
        hint = tools.install_hint(kyverno.TOOL)
        return f"not installed, {len(dirs)} policy tests not run (install: {hint})"
    return "ran"


def _pint_status(have_pint: bool, sources: Sequence[promtool.RuleSource]) -> str:
    if not have_pint:
        return f"not installed, skipped (install: {tools.install_hint('pint')})"
    return f"ran offline on {len(sources)} PrometheusRules" if sources else "no PrometheusRules"
