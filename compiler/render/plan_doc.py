"""PLAN.md and plan.svg: what one failover costs the network, for the pull request.

Documents for people, next to the objects: never listed in a kustomization, never
applied, never in the Argo CD plugin's stream.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from compiler import chart, engines, units
from compiler.emitted import Emitted
from compiler.plan import Plan
from compiler.plan.model import verify_requirement
from compiler.render import panels
from compiler.render.base import Renderer

CHART = "plan.svg"


def _phase_rows(plan: Plan) -> list[dict[str, str]]:
    return [
        {
            "name": p.name,
            "time": units.human_seconds(p.seconds),
            "bytes": units.human_bytes(p.bytes),
            "peak": units.human_bits(p.peak_bps) if p.peak_bps else "-",
            "formula": p.formula,
            "fits": p.fits,
        }
        for p in plan.failover.phases
    ]


def _numbers(plan: Plan) -> list[str]:
    s = plan.summary()
    fc, dl, hc, cm = s["fullCopy"], s["delta"], s["healthChecks"], s["connectionMigration"]
    rows = [
        f"full copy to every standby: {fc['formula']} = {fc['gigabits']} Gbit -> "
        f"{units.human_seconds(fc['seconds'])} at line rate",
        f"delta: {dl['formula']} = {units.human_bytes(dl['bytes'])} -> "
        f"{units.human_seconds(dl['seconds'])} at line rate",
        f"health checks: {hc['formula']} = {hc['probesPerSecond']:g} probes/s, "
        f"{units.human_bytes(hc['bytesPerSecond'])}/s",
        f"connection migration: {cm['formula']} = {units.human_seconds(cm['seconds'])}",
    ]
    rows += [
        f"tier {name}: {t['replicas']} x egress {t['egress']}bit/s, priority {t['priority']}, "
        f"weight sync {units.human_bits(t['syncRateBitsPerSecond'])}"
        for name, t in s["tiers"].items()
    ]
    return rows


def _weights(plan: Plan) -> list[str]:
    d = plan.failover.design_copy
    delta = int(plan.model_size * plan.sync.expected_delta)
    rows = [
        f"the design's per-replica copies: {d['formula']} = {d['gigabits']} Gbit -> "
        f"{units.human_seconds(d['seconds'])} at line rate, before protocol overhead",
        f"standbyc: one model directory per tier on the shared claim; a new generation moves "
        f"the delta, {units.human_bytes(delta)} per sync tier, and the other files that changed",
    ]
    model = PurePosixPath(plan.model_path)
    for t in plan.sync.tiers:
        delta_s = delta * 8 / t.sync_rate_bps
        loads = (
            "restart to load it (reload: restart)"
            if t.reload is None
            else f"load it while running: the Job asks its pods ({t.reload.api}, port "
            f"{t.reload.port}, through the headless Service {t.reload.service}) "
            f"{t.reload.max_unavailable} at a time"
        )
        rows.append(
            f"tier {t.name}: a delta in {units.human_seconds(delta_s)}, a "
            f"full copy in {units.human_seconds(t.sync_seconds_full)} at its weight-sync rate "
            f"{units.human_bits(t.sync_rate_bps)}; its engines load the model directory "
            f"{model} (claim {plan.sync.claim}, subPath {t.name}, mounted at {model.parent}) "
            f"and {loads}"
        )
        if t.reload is not None:
            rows.append(_time_to_serve(plan, t.name, delta_s))
    reloading = [t for t in plan.sync.tiers if t.reload is not None]
    for api in sorted({t.reload.api for t in reloading if t.reload is not None}):
        tiers = ", ".join(t.name for t in reloading if t.reload and t.reload.api == api)
        needs = engines.server_needs(api, plan.model_path, plan.generation_file)
        rows.append(f"tier {tiers}: the engine pods run {needs}")
    ports = sorted({t.reload.port for t in plan.sync.tiers if t.reload is not None})
    if ports:
        rows.append(
            "a NetworkPolicy of yours that selects the engine pods needs this ingress rule for "
            f"the weight-sync Jobs: `{plan.reload_ingress_rule(ports)}`"
        )
    if plan.sync.tiers and plan.sync.verify is not None:
        rows.append(
            "signed generations only: each weight-sync Job verifies the directory it staged "
            "(OpenSSF Model Signing, spec.weightSync.verify) before the swap, and refuses the "
            "rest (StandbyWeightsRefused); it needs "
            f"{verify_requirement(plan.namespace, plan.sync.verify)}"
        )
    return rows


def _time_to_serve(plan: Plan, name: str, delta_s: float) -> str:
    """From "generation published" to "every pod of the tier serves it", and what the tier
    has left meanwhile."""
    t = next(t for t in plan.sync.tiers if t.name == name)
    assert t.reload is not None
    reload_s = plan.failover_inputs.reload_ms / 1000
    r = t.reload
    total = delta_s + r.waves * reload_s
    if engines.serves_while_loading(r.api, r.swap):
        meanwhile = (
            "meanwhile every pod serves: the old instance until the new one is ready, so a "
            f"failover during it finds all {r.pods} ready"
        )
    else:
        meanwhile = (
            f"meanwhile at most {r.max_unavailable} of its {r.pods} pod(s) are loading and "
            f"serve nothing, so a failover during it finds {r.pods - r.max_unavailable} ready"
        )
    return (
        f"tier {name}, from published to every pod serving it: the delta "
        f"{units.human_seconds(delta_s)} + {r.waves} wave(s) of {r.max_unavailable} pod(s) "
        f"(reload.maxUnavailable) x a reload {units.human_seconds(reload_s)} (failover.reload) "
        f"= {units.human_seconds(total)}; {meanwhile} (the Job's deadline allows {r.budget_s} "
        "s for the reload at worst)"
    )


def _scenario(plan: Plan) -> str:
    f = plan.failover
    holds = {"current": "current weights (nothing to move)",
             "behind": "weights one generation behind (the delta moves)",
             "missing": "no weights (a full copy moves)"}  # fmt: skip
    return (
        f"{plan.failover_inputs.failed_replicas} serving pod(s) fail; the "
        f"{plan.failover_inputs.takeover} tier's standbys take over, holding "
        f"{holds[plan.failover_inputs.weights]}. Objective: "
        + (units.prom_duration(f.rto_ms) if f.rto_ms is not None else "none (failover.rto)")
        + "."
    )


def _dashboard(plan: Plan) -> str:
    """Where the failover can be watched as it happens, against this plan."""
    if not plan.dashboard.enabled:
        return ""
    f = plan.failover
    peak = panels.expected_peak(plan)
    return (
        f"During a failover, watch the Grafana dashboard **standbyc: {plan.namespace}/"
        f"{plan.name}** (folder {plan.dashboard.folder}, uid `{panels.uid(plan)}`, from "
        f"`configmap-{plan.names.dashboard}.yaml`): its Failover row draws this plan's "
        f"expected peak ({units.human_bits(peak.peak_bps)}) and duration "
        f"({units.human_seconds(f.seconds)}) as reference lines beside the egress measured."
    )


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    f = plan.failover
    fanout: list[dict[str, Any]] = [
        {
            "label": row.label,
            "bytes": units.human_bytes(row.bytes_each),
            "store": units.human_seconds(row.seconds_store)
            + (" (its egress binds)" if row.store_binds else " (the tiers' rates bind)"),
            "object_store": units.human_seconds(row.seconds_object_store),
        }
        for row in f.fanout
    ]
    context = {
        "directory": f"{plan.namespace}/{plan.name}",
        "verdict": f.verdict(),
        # The first line a reviewer reads: a missed objective is not left to the body.
        "heading": f"{plan.namespace}/{plan.name}"
        + {True: ": objective met", False: ": OBJECTIVE MISSED", None: ""}[f.met],
        "chart": CHART,
        "scenario": _scenario(plan),
        "phases": _phase_rows(plan),
        "total": units.human_seconds(f.seconds),
        "total_bytes": units.human_bytes(sum(p.bytes for p in f.phases)),
        "advice": list(f.advice),
        "dashboard": _dashboard(plan),
        "weights": _weights(plan),
        "store_egress": units.human_bits(plan.failover_inputs.store_egress_bps),
        "fanout": fanout,
        "numbers": _numbers(plan),
    }
    doc = r.render_text("plan.md.j2", context)
    svg = chart.render(
        f,
        title=f"Bandwidth over one failover: {plan.namespace}/{plan.name}",
        link_bps=plan.link_bps,
        tier_egress={t.name: t.egress_bps for t in plan.tiers},
    )
    return [Emitted("PLAN.md", {}, text=doc), Emitted(CHART, {}, text=svg)]
