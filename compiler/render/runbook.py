"""RUNBOOK.md: a section per alert the spec emits, beside PLAN.md, for the engineer the
page woke up: what it means with this spec's numbers, the rule's own query to run, and
what to do. Each alert's ``runbook_url`` points at its section when the spec says where
out/ is browsed (``alerts.outUrl``; ``compiler.alerts.base.runbook_url``).

A document for people, like PLAN.md: never listed in a kustomization, never applied."""

from __future__ import annotations

import re

from compiler import units
from compiler.alerts.base import RUNBOOK, Alert, Context
from compiler.emitted import Emitted
from compiler.plan import Plan
from compiler.render import panels
from compiler.render.base import Renderer

_LABEL = re.compile(r"\{\{\s*\$labels\.(\w+)\s*\}\}")
_VALUE = re.compile(r"\{\{\s*\$value\s*\}\}")
# A value the annotation queries when it fires: printf'd with the alert's labels.
_QUERY = re.compile(
    r'\{\{ with printf "([^"]*)"((?: \$labels\.\w+)*) \| query \}\}'
    r"\{\{ \. \| first \| value \}\}\{\{ end \}\}"
)


def _query(match: re.Match[str]) -> str:
    query = match.group(1)
    for label in match.group(2).split():
        query = query.replace("%q", f'"<{label.removeprefix("$labels.")}>"', 1)
    return f"(the value of `{query}`)"


def plain(text: str, ctx: Context) -> str:
    """An annotation with its Go templates as placeholders: ``<pod>``, ``<tier>``."""
    text = _QUERY.sub(_query, text.replace(ctx.tier_of(), "<tier>"))
    text = _LABEL.sub(r"<\1>", text)
    return _VALUE.sub("<value>", text)


def render(plan: Plan, r: Renderer, alerts: list[Alert]) -> Emitted:
    ctx = Context(plan)
    sections = [
        {
            "name": a.name,
            "severity": a.labels.get("severity", ""),
            "for": units.prom_duration(a.for_ms),
            "keep": a.keep_firing_ms and units.prom_duration(a.keep_firing_ms),
            "summary": plain(a.annotations["summary"], ctx),
            "description": plain(a.annotations["description"], ctx),
            "expr": a.expr.rstrip("\n"),
            "actions": list(a.actions),
        }
        for a in alerts
    ]
    context = {
        "heading": f"{plan.namespace}/{plan.name}",
        "rules": plan.names.rules,
        "dashboard": panels.uid(plan) if plan.dashboard.enabled else None,
        "folder": plan.dashboard.folder,
        "sections": sections,
    }
    return Emitted(RUNBOOK, {}, text=r.render_text("runbook.md.j2", context))
