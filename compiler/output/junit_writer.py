"""JUnit XML for CI test reports (GitLab, Jenkins, GitHub test reporters): exactly one
document on stdout, whatever the outcome.

The writer reads the outcome's JSON document, so every command has it:
- spec problems (``diagnostics``: file, line, column, field path) become the suite ``spec``,
  one test case per spec file, a ``<failure>`` per problem located as ``file:line:column``;
- a validation report (``findings`` and the files each validator checked) becomes one suite
  per validator: kubeconform one case per Kubernetes version, promtool, pint, Kyverno and
  standbyc's own checks one case per file, each problem a ``<failure>`` located by its
  JSON pointer;
- an outcome with no such checks, or a failure none of them names (out/ is stale, say),
  adds one case named after the command's result, failed when its exit code says so.
Warnings go to the suite's ``<system-out>``; a warning is not a failure. Timings are left
out, so the same outcome gives the same bytes.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TextIO

if TYPE_CHECKING:
    from compiler.output.outcome import Outcome

# Files a validator reported as checked, by report key, and the tool of their findings.
_CHECKED = {
    "rule_checks": "promtool-check",
    "rule_tests": "promtool-test",
    "policy_tests": "kyverno",
}
_SUITE = {
    "kubeconform": "kubeconform",
    "promtool-check": "promtool check rules",
    "promtool-test": "promtool test rules",
    "pint": "pint",
    "kyverno": "kyverno test",
    "standbyc": "standbyc",
}


@dataclass
class _Case:
    name: str
    classname: str
    failures: list[tuple[str, str]] = field(default_factory=list)  # (message, detail)


@dataclass
class _Suite:
    name: str
    cases: dict[str, _Case] = field(default_factory=dict)
    out: list[str] = field(default_factory=list)

    def case(self, name: str, classname: str = "") -> _Case:
        return self.cases.setdefault(name, _Case(name, classname or self.name))


def write(outcome: Outcome, out: TextIO, err: TextIO) -> None:
    del err  # the document says what went wrong; the exit code says that it did
    doc = outcome.to_json()
    suites: dict[str, _Suite] = {}
    _spec_suite(doc, suites)
    report = doc.get("validation") if isinstance(doc.get("validation"), dict) else doc
    if isinstance(report, dict) and "findings" in report and "versions" in report:
        _report_suites(report, suites)
    cases = [c for s in suites.values() for c in s.cases.values()]
    failed = any(c.failures for c in cases)
    if not cases or (outcome.exit_code and not failed):
        # No checks of its own, or a failure none of them names (out/ is stale, say): the
        # command's result is a case of its own, failed when its exit code says so.
        suite = suites.setdefault("standbyc", _Suite("standbyc"))
        case = suite.case(_first_line(outcome.text()) or "standbyc", "standbyc")
        if outcome.exit_code:
            problem = outcome.problem() or f"exit code {outcome.exit_code}"
            case.failures.append((_first_line(problem), problem))
    out.write(_xml(list(suites.values())))


def _spec_suite(doc: Mapping[str, Any], suites: dict[str, _Suite]) -> None:
    diagnostics = doc.get("diagnostics")
    specs = doc.get("specs")
    if not isinstance(diagnostics, list) and not isinstance(specs, list):
        return
    suite = suites.setdefault("spec", _Suite("spec"))
    for spec in specs if isinstance(specs, list) else ():
        if isinstance(spec, dict) and isinstance(spec.get("source"), str):
            suite.case(spec["source"])
    for d in diagnostics if isinstance(diagnostics, list) else ():
        if not isinstance(d, dict):
            continue
        file = str(d.get("file", ""))
        where = ":".join(str(p) for p in (file, d.get("line"), d.get("column")) if p)
        path = f"{d['path']}: " if d.get("path") else ""
        message = str(d.get("message", ""))
        suite.case(file or "spec").failures.append((message, f"{where}: {path}{message}"))
    for warning in doc.get("warnings") or ():
        suite.out.append(str(warning))


def _report_suites(report: Mapping[str, Any], suites: dict[str, _Suite]) -> None:
    findings = [f for f in report.get("findings") or () if isinstance(f, dict)]
    kube = suites.setdefault("kubeconform", _Suite("kubeconform"))
    for v in report.get("versions") or ():
        version = str(v.get("kube_version", ""))
        case = kube.case(f"kubernetes {version}")
        for f in findings:
            if f.get("tool") == "kubeconform" and version in (f.get("kube_versions") or ()):
                case.failures.append(_failure(f))
    for key, tool in _CHECKED.items():
        for result in report.get(key) or ():
            if isinstance(result, dict) and result.get("file"):
                _tool_suite(suites, tool).case(str(result["file"]))
    for f in findings:
        if f.get("tool") != "kubeconform":
            suite = _tool_suite(suites, str(f.get("tool", "standbyc")))
            suite.case(str(f.get("file", ""))).failures.append(_failure(f))
    pint = report.get("pint")
    if pint:  # pint lints the PrometheusRules promtool checked, when it ran
        suite = _tool_suite(suites, "pint")
        suite.out.append(str(pint))
        if str(pint).startswith("ran"):
            for result in report.get("rule_checks") or ():
                if isinstance(result, dict) and result.get("file"):
                    suite.case(str(result["file"]))


def _tool_suite(suites: dict[str, _Suite], tool: str) -> _Suite:
    name = _SUITE.get(tool, tool)
    return suites.setdefault(name, _Suite(name))


def _failure(f: Mapping[str, Any]) -> tuple[str, str]:
    message = str(f.get("message", ""))
    parts = [str(f.get("file", ""))]
    if f.get("kind") or f.get("name"):
        parts.append(f"{f.get('kind', '')}/{f.get('name', '')}")
    if f.get("pointer"):
        parts.append(str(f["pointer"]))
    severity = f.get("severity", "error")
    shown = f"{': '.join(parts)}: {message}"
    return (_first_line(message), shown if severity == "error" else f"{severity}: {shown}")


def _first_line(text: str) -> str:
    return text.strip().split("\n", 1)[0] if text else ""


def _xml(suites: Iterable[_Suite]) -> str:
    root = ET.Element("testsuites", name="standbyc")
    total = failed = 0
    for suite in suites:
        cases = list(suite.cases.values())
        if not cases and not suite.out:
            continue
        broken = sum(1 for c in cases if c.failures)
        el = ET.SubElement(
            root, "testsuite", name=suite.name, tests=str(len(cases)), failures=str(broken)
        )
        el.set("errors", "0")
        for case in cases:
            c = ET.SubElement(el, "testcase", name=case.name, classname=case.classname)
            for message, detail in case.failures:
                failure = ET.SubElement(c, "failure", message=message, type="error")
                failure.text = detail
        if suite.out:
            ET.SubElement(el, "system-out").text = "\n".join(suite.out)
        total, failed = total + len(cases), failed + broken
    root.set("tests", str(total))
    root.set("failures", str(failed))
    root.set("errors", "0")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, "unicode") + "\n"
