"""The alert registry: every alert module has its settings in the spec, and every alert
setting in the spec has its module, so no alert is rendered unchecked or checked unrendered."""

from __future__ import annotations

import copy
import pickle
import re
import shutil
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic.alias_generators import to_camel
from ruamel.yaml import YAML

from compiler import alerts, names, units
from compiler.admit import admit
from compiler.gate import promtool
from compiler.load import load_text
from compiler.plan import build
from compiler.spec import Alerts, DurationAlert, RateAlert, settings
from tests.conftest import CASES, OUT, REPO

SHARED = {"evaluation_interval", "scrape_interval", "runbook_base_url", "out_url", "rule_labels"}


def test_registry_and_spec_agree() -> None:
    """Each alert module declares its settings, and the admitted spec has them all, under the
    module's KEY, with the class names the committed schema knows them by."""
    spec = alerts.STANDBY_SPEC.model_fields["spec"].annotation
    assert isinstance(spec, type) and issubclass(spec, BaseModel)
    section = spec.model_fields["alerts"].annotation
    assert isinstance(section, type) and issubclass(section, Alerts)
    assert set(Alerts.model_fields) == SHARED
    modules = {alerts.field(m): m for m in alerts.ALERTS}
    assert list(section.model_fields) == [*Alerts.model_fields, *modules]
    for name, module in modules.items():
        assert to_camel(name) == module.KEY, name
        assert section.model_fields[name].annotation is module.SETTINGS, name
        assert issubclass(module.SETTINGS, RateAlert | DurationAlert), name
        assert module.SETTINGS.__name__ == module.KEY[0].upper() + module.KEY[1:] + "Alert"
        assert alerts.is_rate(module) == ("window" in module.SETTINGS.model_fields), name
        admitted = section()
        assert settings(admitted, module.SETTINGS) is getattr(admitted, name), name


# -- the generated promtool tests pin the rules -------------------------------------------

# The example specs' and every golden case's (each case times its alerts differently).
TESTS_DIRS = sorted(OUT.glob("*/*/tests")) + sorted(CASES.glob("*/expected/*/*/tests"))


def _scale(match: re.Match[str], factor: float) -> str:
    value = float(match.group(2))
    changed = value * factor if value > 100 else value + (1 if factor > 1 else -1)
    return f"{match.group(1)}{units.float_literal(changed)}"


def _duration(text: str, factor: float) -> str:
    return units.prom_duration(round(units.parse_duration(text) * factor))


def _mutations(rule: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """Each way the emitted rule can drift from the spec, as (what changed, the rule)."""
    out: list[tuple[str, dict[str, Any]]] = []
    name = rule.get("alert") or rule["record"]

    def changed(what: str, **fields: Any) -> None:
        out.append((f"{name}: {what}", {**rule, **fields}))

    expr = rule["expr"]
    if "record" in rule:  # what a record holds is the spec's number: any other fails
        recorded = re.compile(r"^vector\(([0-9]+)\)$")
        assert recorded.match(expr), expr
        for delta in (1, -1):
            moved = recorded.sub(lambda m, d=delta: f"vector({int(m.group(1)) + d})", expr)  # type: ignore[misc]
            changed(f"records {delta:+d}", expr=moved)
        return out
    threshold = re.compile(r"( [<>] )([0-9.e+]+)$", re.M)
    if threshold.search(expr):
        for factor in (1.05, 0.95):
            moved = threshold.sub(lambda m, f=factor: _scale(m, f), expr)  # type: ignore[misc]
            changed(f"threshold x{factor}", expr=moved)
    thresholds = list(threshold.finditer(expr))
    if len(thresholds) > 1:  # a threshold per tier: each one pinned on its own
        for i, m in enumerate(thresholds):
            for factor in (1.05, 0.95):
                moved = expr[: m.start()] + _scale(m, factor) + expr[m.end() :]
                changed(f"threshold {i} x{factor}", expr=moved)
    window = re.compile(r"\[(\w+)\]")
    if window.search(expr):
        for factor in (2, 0.5):
            moved = window.sub(lambda m, f=factor: f"[{_duration(m.group(1), f)}]", expr)  # type: ignore[misc]
            changed(f"window x{factor}", expr=moved)
    for factor in (2, 0.5):
        changed(f"for x{factor}", **{"for": _duration(rule["for"], factor)})
    if "keep_firing_for" in rule:
        changed("no keep_firing_for", keep_firing_for="0s")
    return out + [(f"{name}: {what}", {**rule, "expr": e}) for what, e in _undone(expr)]


def _undone(expr: str) -> list[tuple[str, str]]:
    """The expression with one of the fixes for real exporters' series undone."""
    out: list[tuple[str, str]] = []
    tier_key = re.search(r'(label_\w+)=~?"(?:hot|warm|cold)', expr)
    key = tier_key.group(1) if tier_key else None
    per_pod = "max by (namespace, pod) (\n"
    if "rate(" in expr and key:
        # the tier as part of the alert's identity, joined with group_left
        old = expr.replace(per_pod, f"max by (namespace, pod, {key}) (\n")
        old = old.replace("* on (namespace, pod)\n", f"* on (namespace, pod) group_left ({key})\n")
        out.append(("tier in the alert's identity", old))
        out += _tier_unmatched(expr)
    if per_pod in expr:
        # two kube-state-metrics replicas: the join's right side is no longer one per pod
        out.append(("join not unique per pod", expr.replace(per_pod, "(\n")))
    if "max by (namespace, pod) (kube_pod_status_ready" in expr:
        ready = expr.replace(
            "max by (namespace, pod) (kube_pod_status", "sum by (namespace, pod) (kube_pod_status"
        )
        out.append(("ready pods counted once per kube-state-metrics replica", ready))
    if key:
        # the engine's selector dropped: another app's pod with the tier label counts
        others = rf'((?:, (?!{re.escape(key)})\w+="[^"]*")+)'
        engine = re.compile(r'(kube_pod_labels\{namespace="[^"]*")' + others)
        if engine.search(expr):
            out.append(("engine selector dropped", engine.sub(r"\1", expr, count=1)))
    wanted = re.compile(
        r'< on \(namespace, standbyc_spec\)( group_left \(\)\n\s*\S+\{namespace="[^"]*")'
        r', standbyc_spec="[^"]*"\}'
    )
    if wanted.search(expr):
        # compared with what any spec in the namespace wants, not with this one's
        out.append(("wanted generation of any spec", wanted.sub(r"< on (namespace)\1}", expr)))
    if 'interface!="lo"' in expr:
        out.append(("loopback counted", expr.replace(', interface!="lo"', "")))
    if "# a later run of the same CronJob succeeded" in expr:
        cut = expr.partition("# a later run of the same CronJob succeeded")[0]
        out.append(("a failed CronJob run pages after later runs succeed", cut))
    out += _undone_superseded(expr)
    if "# only while kube-state-metrics reports the namespace" in expr:
        # counts ready pods while the exporter restarts or runs without the allowlist
        unguarded = expr.partition("# only while kube-state-metrics reports the namespace")[0]
        out.append(("pages while kube-state-metrics cannot tell", unguarded))
    bridged = re.compile(r"last_over_time\((\w+\{[^}]*\})\[\w+\]\)")
    if bridged.search(expr):
        # the pushed value as scraped: a Pushgateway restart resolves the alert
        out.append(("Pushgateway restart not bridged", bridged.sub(r"\1", expr)))
    unpushed = re.compile(r"absent_over_time\((\w+\{[^}]*\})\[\w+\]\)")
    if unpushed.search(expr):
        out.append(("Pushgateway restart not bridged", unpushed.sub(r"absent(\1)", expr)))
    if expr.startswith("# kube-state-metrics reports the namespace without"):
        lost, sep, unlabelled = expr.partition("\nor\n")
        assert sep, expr
        out.append(("allowlist lost not noticed", unlabelled))
        out.append(("unlabelled pods not noticed", lost + "\n"))
    return out


def _tier_unmatched(expr: str) -> list[tuple[str, str]]:
    """Only the tiers the spec gives replicas matched (a pod relabelled into another drops
    out), or a rule with a branch per tier with one of them left out."""
    out = []
    if '"hot|warm|cold"' in expr:
        out.append(("cold tier not matched", expr.replace('"hot|warm|cold"', '"hot|warm"')))
    branches = expr.split("\nor\n")
    for i in range(len(branches) if len(branches) > 1 else 0):
        kept = "\nor\n".join(b for j, b in enumerate(branches) if j != i)
        if i == len(branches) - 1:
            kept += "\n"
        elif i == 0:  # the head comment goes with the first branch
            kept = branches[0].partition("\n")[0] + "\n" + kept
        out.append((f"tier branch {i} dropped", kept))
    return out


def _undone_superseded(expr: str) -> list[tuple[str, str]]:
    """A hook Job's failure, with its end by a later Job of its tier undone or loosened."""
    mark = "# a later Job of the same tier succeeded"
    if mark not in expr:
        return []
    out = [("a failed Job pages after a later Job of its tier succeeds", expr.partition(mark)[0])]
    if re.search(r"\((?:hot|warm|cold)\|", expr):  # two tiers or more: any tier's success
        any_tier = expr.replace(
            "< on (namespace, tier) group_left ()", "< on (namespace) group_left ()"
        ).replace("max by (namespace, tier) (", "max by (namespace) (")
        out.append(("a later Job of another tier ends a failure", any_tier))
    running = expr.replace(
        "    and on (namespace, job_name)\n", "    unless on (namespace, job_name)\n"
    )
    out.append(("a later Job that has not succeeded ends a failure", running))
    return out


def _passing(work: Path, test_files: list[str]) -> set[str]:
    """Of ``test_files`` (relative to ``work``), those promtool passes, in one run: every
    file must be reported on, so a file promtool skipped is never taken for a caught drift."""
    outcome = promtool.test_rules(test_files, cwd=work, display=str)
    assert not [f for f in outcome.findings if "did not report" in f.message], outcome.findings
    assert [r.file for r in outcome.results] == test_files
    return {r.file for r in outcome.results if r.ok}


@pytest.mark.parametrize(
    "tests", TESTS_DIRS, ids=lambda p: p.parent.relative_to(p.parents[2]).as_posix()
)
def test_every_drift_from_the_spec_fails_a_generated_test(tests: Path, tmp_path: Path) -> None:
    """Changing a threshold, a window, a ``for`` (or undoing a fix) in an emitted rule makes
    at least one of its generated promtool tests fail; the unchanged rules pass. Each drift
    is written beside a copy of its test in a folder of its own; promtool runs them all at
    once."""
    work = tmp_path / "tests"
    shutil.copytree(tests, work)
    yaml = YAML()
    rules_files = sorted(work.glob("*.rules.yaml"))
    (deployed,) = tests.parent.glob("prometheusrule-*.yaml")
    alerts_deployed = yaml.load(deployed.read_text())["spec"]["groups"][0]["rules"]
    assert len(rules_files) == len(alerts_deployed)  # one per alert and per record
    originals = [f.name.replace(".rules.yaml", ".test.yaml") for f in rules_files]
    assert _passing(work, originals) == set(originals)
    drifts: dict[str, str] = {}  # the drifted copy's test file -> what drifted
    for rules_file, test_file in zip(rules_files, originals, strict=True):
        original = yaml.load(rules_file.read_text())
        (rule,) = original["groups"][0]["rules"]
        mutations = _mutations(dict(rule))
        if "rate(" in rule["expr"]:  # a bandwidth alert: its threshold must be pinned too
            assert any("threshold" in what for what, _ in mutations), rules_file.name
        for what, mutated in mutations:
            doc = copy.deepcopy(original)
            doc["groups"][0]["rules"] = [mutated]
            folder = work / f"drift-{len(drifts):03d}"
            folder.mkdir()
            shutil.copy(work / test_file, folder / test_file)
            with (folder / rules_file.name).open("w") as fh:
                yaml.dump(doc, fh)
            drifts[f"{folder.name}/{test_file}"] = f"{rules_file.name}: {what}"
    assert len(drifts) >= 4 * len(rules_files)
    survivors = _passing(work, list(drifts))
    assert sorted(drifts[f] for f in survivors) == []


@pytest.mark.parametrize(
    ("key", "name"),
    [
        # kube-state-metrics: sanitise, then snake_case, then lower case
        ("tier", "label_tier"),
        ("example.com/standbyTier", "label_example_com_standby_tier"),
        ("app.kubernetes.io/name", "label_app_kubernetes_io_name"),
        ("StandbyTier", "label_standby_tier"),
        ("standbyTIER", "label_standby_tier"),
        ("tier2Name", "label_tier2_name"),
        ("ABCdef", "label_abcdef"),
    ],
)
def test_pod_label_keys_as_kube_state_metrics_names_them(key: str, name: str) -> None:
    assert names.ksm_label(key) == name


def test_an_admitted_spec_and_its_plan_cross_processes() -> None:
    """The compile's worker processes hand back their plans pickled: every class the alert
    registry makes (the settings, the alerts section, the spec) is found where it says it
    lives, and comes back as itself."""
    text = (REPO / "specs" / "inference-engine.yaml").read_text()
    admitted = admit(load_text(text, "inference-engine.yaml"))
    plan = build(admitted.spec, "inference-engine.yaml")
    back = pickle.loads(pickle.dumps(plan))
    assert back == plan
    assert type(back.alerts) is type(plan.alerts)
    for module in alerts.ALERTS:
        assert type(settings(back.alerts, module.SETTINGS)) is module.SETTINGS


def _descriptions(spec: str) -> dict[str, str]:
    admitted = admit(load_text(spec, "spec.yaml"))
    plan = build(admitted.spec, "spec.yaml")
    return {a.name: a.annotations["description"] for a in alerts.build_all(plan)}


HEAD = "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\nmetadata: {name: solo}\nspec:\n"


def test_the_texts_speak_of_the_tiers_and_the_link_the_spec_has() -> None:
    """A hot-only spec on a link its spike threshold nearly fills: no warm or cold standby
    to land on, and the link called saturated; the seed's three tiers, whose threshold is
    half the link, are told where a failover lands and that the link has room."""
    solo = _descriptions(
        HEAD + "  network: {link: 60Gbit/s}\n"
        "  tiers: {hot: {replicas: 2, egress: 25Gbit/s}, warm: null, cold: null}\n"
    )
    assert (
        "the spec has no other tier, so a failover now has fewer than the 2 hot"
        in (solo["HotTierBelowReplicas"])
    )
    assert "warm" not in solo["HotTierBelowReplicas"]
    spike = solo["FailoverBandwidthSpike"]
    assert "(tier hot, and any pod relabelled into another)" in spike
    assert "83% of the 60 Gbit/s link (network.link): a failover or weight sync is " in spike
    assert "saturating the link" in spike
    seed = _descriptions((REPO / "specs" / "inference-engine.yaml").read_text())
    assert "may land on the warm or cold standbys" in seed["HotTierBelowReplicas"]
    assert "(tiers hot, warm, cold, and any" in seed["FailoverBandwidthSpike"]
    assert (
        "50% of the 100 Gbit/s link (network.link): the link still has room"
        in (seed["FailoverBandwidthSpike"])
    )


def _rule_thresholds(spec: str) -> dict[str, str]:
    admitted = admit(load_text(spec, "spec.yaml"))
    plan = build(admitted.spec, "spec.yaml")
    (high,) = [a for a in alerts.build_all(plan) if a.name == "InferenceBandwidthHigh"]
    return dict(re.findall(r'="(hot|warm|cold)"\}\n\s*\)\n\) \* 8 > ([0-9.e+]+)', high.expr))


THREE = "  tiers: {hot: {replicas: 2, egress: 50Gbit/s}, warm: {replicas: 2, egress: 10Gbit/s}, " \
    "cold: {replicas: 1, egress: 5Gbit/s}}\n"  # fmt: skip


def _high_warnings(spec: str) -> list[str]:
    return [f"{w.location.path}: {w.message}" for w in admit(load_text(spec, "spec.yaml")).warnings
            if "bandwidthHigh" in w.location.path]  # fmt: skip


def test_each_tier_pages_near_its_own_cap_unless_the_spec_says_otherwise() -> None:
    """The seed's one 10 Gbit/s for every pod paged on a normal takeover under a 50 Gbit/s
    hot cap and could never fire for a 5 Gbit/s cold pod. Each tier now has 85 % of its
    own cap (the link where lower, and for a tier without replicas), a tier's own value
    wins, and one the spec sets that cannot fire or pages at the cap is a warning."""
    link = "  network: {link: 400Gbit/s}\n"
    assert _rule_thresholds(HEAD + link + THREE) == {
        "hot": "42500000000", "warm": "8500000000", "cold": "4250000000"
    }  # fmt: skip
    hot_only = (
        HEAD
        + "  network: {link: 100Gbit/s}\n"
        + ("  tiers: {hot: {replicas: 2, egress: 50Gbit/s}, warm: null, cold: null}\n")
    )
    assert _rule_thresholds(hot_only) == {"hot": "42500000000", "warm": "85000000000",
                                          "cold": "85000000000"}  # fmt: skip
    own = HEAD + link + THREE + "  alerts:\n    bandwidthHigh: {share: 90%, thresholds: " \
        "{cold: 4.5Gbit/s}}\n"  # fmt: skip
    assert _rule_thresholds(own) == {"hot": "45000000000", "warm": "9000000000",
                                     "cold": "4500000000"}  # fmt: skip
    assert _high_warnings(own) == []
    one = HEAD + link + THREE + "  alerts:\n    bandwidthHigh: {threshold: 10Gbit/s}\n"
    assert _high_warnings(one) == [
        "spec.alerts.bandwidthHigh.threshold: 10 Gbit/s for the hot tier is below 80% of its "
        "egress per pod (50 Gbit/s): a takeover at it pages",
        "spec.alerts.bandwidthHigh.threshold: 10 Gbit/s for the warm tier can never fire: a "
        "warm pod sends at most 10 Gbit/s (its egress, the link)",
        "spec.alerts.bandwidthHigh.threshold: 10 Gbit/s for the cold tier can never fire: a "
        "cold pod sends at most 5 Gbit/s (its egress, the link)",
    ]
