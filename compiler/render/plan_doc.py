"""PLAN.md and plan.svg: what one failover costs the network, for the pull request.

Documents for people, next to the objects: never listed in a kustomization, never
applied, never in the Argo CD plugin's stream.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from compiler import chart, trust, units
from compiler.plan import Plan
from compiler.render.base import Emitted, Renderer

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
        loads = (
            "restart to load it (reload: restart)"
            if t.reload is None
            else f"load it while running: the Job asks each ready pod ({t.reload.api}, port "
            f"{t.reload.port}, through the headless Service {t.reload.service})"
        )
        rows.append(
            f"tier {t.name}: a delta in {units.human_seconds(delta * 8 / t.sync_rate_bps)}, a "
            f"full copy in {units.human_seconds(t.sync_seconds_full)} at its weight-sync rate "
            f"{units.human_bits(t.sync_rate_bps)}; its engines load the model directory "
            f"{model} (claim {plan.sync.claim}, subPath {t.name}, mounted at {model.parent}) "
            f"and {loads}"
        )
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
            f"{trust.requirement(plan.namespace, plan.sync.verify)}"
        )
    return rows


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
        "chart": CHART,
        "scenario": _scenario(plan),
        "phases": _phase_rows(plan),
        "total": units.human_seconds(f.seconds),
        "total_bytes": units.human_bytes(sum(p.bytes for p in f.phases)),
        "advice": list(f.advice),
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
