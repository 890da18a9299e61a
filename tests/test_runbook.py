"""RUNBOOK.md beside PLAN.md: a section per alert the spec emits, each alert's runbook_url
pointing at its own section where out/ is browsed, and a warning while the links go to the
placeholder."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from compiler.admit import admit
from compiler.alerts import build_all
from compiler.load import load_text
from compiler.plan import build
from tests.conftest import OUT

SPECS = sorted(p.parent for p in OUT.glob("*/*/RUNBOOK.md"))


def _anchor(heading: str) -> str:
    """The anchor GitHub (and GitLab) give a Markdown heading."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("directory", SPECS, ids=lambda d: d.name)
def test_every_alert_links_to_its_own_section(directory: Path) -> None:
    (rule_file,) = directory.glob("prometheusrule-*.yaml")
    rules = [r for r in yaml.safe_load(rule_file.read_text())["spec"]["groups"][0]["rules"]
             if "alert" in r]  # fmt: skip
    text = (directory / "RUNBOOK.md").read_text()
    sections = dict(re.findall(r"^## (\w+)\n(.*?)(?=^## |\Z)", text, re.M | re.S))
    assert list(sections) == [r["alert"] for r in rules]
    assert "{{" not in text  # every template of an annotation is a placeholder here
    where = f"{directory.parent.name}/{directory.name}/RUNBOOK.md"
    for rule in rules:
        url = rule["annotations"]["runbook_url"]
        page, _, anchor = url.partition("#")
        assert page.endswith("/out/" + where), url
        assert anchor == _anchor(rule["alert"])
        body = sections[rule["alert"]]
        assert f"```promql\n{rule['expr']}```" in body  # the rule's own query, verbatim
        assert f"for {rule['for']}" in body
        assert re.search(r"What to do:\n\n1\. \S", body), rule["alert"]


HEAD = "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\nmetadata: {name: solo}\nspec:\n"


def _urls_and_warnings(alerts: str) -> tuple[set[str], list[str]]:
    admitted = admit(load_text(HEAD + alerts, "spec.yaml"))
    plan = build(admitted.spec, "spec.yaml")
    urls = {a.annotations["runbook_url"].rsplit("/", 1)[0] for a in build_all(plan)}
    return urls, [w.message for w in admitted.warnings if w.location.path.startswith("spec.alerts")]


def test_the_placeholder_is_warned_about_and_a_spec_s_own_runbooks_win() -> None:
    urls, warned = _urls_and_warnings("  engine: {}\n")
    assert urls == {"https://runbooks.example.com/standbyc"}
    assert len(warned) == 1 and warned[0].startswith("spec.alerts.outUrl is not set")
    urls, warned = _urls_and_warnings(
        "  alerts: {runbookBaseUrl: 'https://wiki.acme.dev/runbooks', "
        "outUrl: 'https://git.acme.dev/gitops/-/blob/main/out'}\n"
    )
    assert urls == {"https://wiki.acme.dev/runbooks"} and warned == []
    urls, warned = _urls_and_warnings(
        "  alerts: {outUrl: 'https://git.acme.dev/g/-/blob/main/out/'}\n"
    )
    assert urls == {"https://git.acme.dev/g/-/blob/main/out/default/solo"} and warned == []
