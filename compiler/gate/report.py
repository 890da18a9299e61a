"""What a validation run found: frozen records, a text summary and a JSON form."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

Severity = Literal["error", "warning"]
ERROR: Severity = "error"
WARNING: Severity = "warning"


def warning_count(found: int, also: dict[str, int]) -> str:
    """``3 warnings (1 missed failover objective, 1 from the specs)``: the total, and what the
    ones not found by a validator are."""
    extra = {what: n for what, n in also.items() if n}
    total = found + sum(extra.values())
    parts = ([f"{found} from the validators"] if found and extra else []) + [
        f"{n} {what}" for what, n in extra.items()
    ]
    return f"{total} warnings" + (f" ({', '.join(parts)})" if parts else "")


@dataclass(frozen=True)
class Finding:
    """One problem, located the way kubeconform locates it: file, Kind/name, JSON pointer."""

    file: str
    kind: str
    name: str
    pointer: str
    message: str
    tool: str  # kubeconform | promtool-check | promtool-test | pint | kyverno | kube-apiserver
    # | standbyc
    severity: Severity = "error"
    kube_versions: tuple[str, ...] = ()  # kubeconform only: the versions that reported it

    def location(self) -> str:
        parts = [self.file]
        if self.kind or self.name:
            parts.append(f"{self.kind}/{self.name}")
        if self.pointer:
            parts.append(self.pointer)
        return ": ".join(parts)

    def render(self, all_versions: tuple[str, ...] = ()) -> str:
        text = f"{self.location()}: {self.message}"
        if self.kube_versions and self.kube_versions != all_versions:
            text += f"  [kubernetes {', '.join(self.kube_versions)}]"
        if self.severity == "warning":
            text = f"warning: {text}"
        return text


@dataclass(frozen=True)
class VersionResult:
    """kubeconform's summary for one Kubernetes version."""

    kube_version: str
    valid: int
    invalid: int
    errors: int
    skipped: int

    @property
    def ok(self) -> bool:
        return self.invalid == 0 and self.errors == 0


@dataclass(frozen=True)
class FileResult:
    """One PrometheusRule checked by promtool, or one promtool unit-test file."""

    file: str
    ok: bool
    detail: str = ""  # e.g. "3 rules" for a check


@dataclass(frozen=True)
class Report:
    root: str
    kube_versions: tuple[str, ...]
    resource_files: int
    findings: tuple[Finding, ...]
    versions: tuple[VersionResult, ...]
    rule_checks: tuple[FileResult, ...]
    rule_tests: tuple[FileResult, ...]
    pint: str  # "ran", or why it did not
    policy_tests: tuple[FileResult, ...] = ()  # kyverno test, one per kyverno-test.yaml
    kyverno: str = ""  # "ran", or why it did not
    apiserver: str = ""  # what the API server dry-run covered ("": not asked)
    tool_seconds: dict[str, float] = field(default_factory=dict)  # summed wall time per tool
    tools_wall_seconds: float = 0.0  # time standbyc sat waiting for the (concurrent) tools
    reused: int = 0  # passes taken from the cache, or from a test that differs only in names
    wall_seconds: float = 0.0
    own_cpu_seconds: float = 0.0  # CPU time of the standbyc process itself, all threads
    tools_cpu_seconds: float = 0.0  # CPU time of the tool processes

    @property
    def errors(self) -> tuple[Finding, ...]:
        return tuple(f for f in self.findings if f.severity == "error")

    @property
    def ok(self) -> bool:
        return (
            not self.errors
            and all(v.ok for v in self.versions)
            and all(r.ok for r in self.rule_checks)
            and all(t.ok for t in self.rule_tests)
            and all(t.ok for t in self.policy_tests)
        )

    @property
    def own_seconds(self) -> float:
        """Time spent in standbyc itself: the wall time minus the time spent waiting on tools."""
        return max(0.0, self.wall_seconds - self.tools_wall_seconds)

    def summary_text(self, also: dict[str, int] | None = None) -> str:
        """The report for people; ``also`` counts warnings found before the gate (by what
        they are), so the verdict line counts every warning the run printed."""
        lines = [f.render(self.kube_versions) for f in self.findings]
        if lines:
            lines.append("")
        lines.append(f"validated {self.root}: {self.resource_files} manifest files")
        for v in self.versions:
            mark = "ok  " if v.ok else "FAIL"
            lines.append(
                f"  {mark} kubernetes {v.kube_version:<5} valid {v.valid:>4}"
                f"  invalid {v.invalid:>3}  errors {v.errors:>3}"
            )
        checked_ok = sum(r.ok for r in self.rule_checks)
        lines.append(
            f"  promtool check rules: {checked_ok}/{len(self.rule_checks)} PrometheusRules ok"
        )
        passed = sum(t.ok for t in self.rule_tests)
        lines.append(f"  promtool test rules:  {passed}/{len(self.rule_tests)} test files passed")
        lines.append(f"  pint: {self.pint}")
        if self.kyverno == "ran":
            passed = sum(t.ok for t in self.policy_tests)
            lines.append(f"  kyverno test: {passed}/{len(self.policy_tests)} policy tests passed")
        elif self.kyverno:
            lines.append(f"  kyverno: {self.kyverno}")
        if self.apiserver:
            lines.append(f"  kube-apiserver: {self.apiserver}")
        n_err, n_warn = len(self.errors), len(self.findings) - len(self.errors)
        if self.reused:
            lines.append(
                f"  {self.reused} passes reused (from the cache: same bytes, same tools; or from "
                "a unit test that differs only in its spec's name and namespace)"
            )
        verdict = "PASSED" if self.ok else "FAILED"
        lines.append(f"{verdict}: {n_err} errors, {warning_count(n_warn, also or {})}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["ok"] = self.ok
        data["own_seconds"] = self.own_seconds
        return data

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2, sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Report:
        """The report ``to_dict`` gave (timings included; the caller replaces them)."""

        def results(key: str) -> tuple[FileResult, ...]:
            return tuple(FileResult(**r) for r in data.get(key, ()))

        return cls(
            root=data["root"],
            kube_versions=tuple(data["kube_versions"]),
            resource_files=data["resource_files"],
            findings=tuple(
                Finding(**{**f, "kube_versions": tuple(f["kube_versions"])})
                for f in data["findings"]
            ),
            versions=tuple(VersionResult(**v) for v in data["versions"]),
            rule_checks=results("rule_checks"),
            rule_tests=results("rule_tests"),
            pint=data["pint"],
            policy_tests=results("policy_tests"),
            kyverno=data.get("kyverno", ""),
            apiserver=data.get("apiserver", ""),
            reused=data.get("reused", 0),
        )
