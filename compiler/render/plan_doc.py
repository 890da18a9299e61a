"""PLAN.md and plan.svg: what one failover costs the network, for the pull request.

Documents for people, next to the objects: never listed in a kustomization, never
applied, never in the Argo CD plugin's stream.
"""

from __future__ import annotations

from pathlib import PurePosixPath
from typing import Any

from compiler import chart, engines, units
from compiler.alerts import bandwidth_high, failover_spike
from compiler.emitted import Emitted
from compiler.failover import expect, numbers, rollout, takeover
from compiler.plan import Plan
from compiler.plan.model import derived_lines, verify_requirement
from compiler.render import panels
from compiler.render.base import Renderer
from compiler.spec import settings

CHART = "plan.svg"


def _s(seconds: float | None) -> str:
    return "never by itself" if seconds is None else units.human_seconds(seconds)


def _modes(plan: Plan) -> list[dict[str, Any]]:
    f = plan.failover
    rto = f.rto_ms
    out = []
    for m in f.modes:
        if rto is None:
            objective = "none set"
        elif m.serving is not None and m.serving * 1000 <= rto:
            objective = "met"
        else:
            objective = "**missed**"
        out.append({
            "title": m.title,
            "what": WHAT[m.mode],
            "gone": _s(m.out_of_service),
            "moved": _s(next(st.at for st in m.steps if st.name == "clients re-attached")),
            "serving": _s(m.serving),
            "replaced": _s(m.replaced),
            "replaced_how": m.replaced_how,
            "caveat": m.caveat,
            "objective": objective,
            "steps": [{"at": _s(st.at), "name": st.name, "how": st.how} for st in m.steps],
        })  # fmt: skip
    return out


WHAT = {
    "crash": "the engine process exits; its node and kernel are fine",
    "hang": "the engine stops answering, its connections' pings included",
    "nodeLoss": "the node goes silent: no packet comes back, nothing reports",
}


def _takeover(plan: Plan) -> list[str]:
    i, e = plan.failover_inputs, plan.failover.egress
    return [
        f"the failed pods' serving traffic lands on the {e.tier} tier: {takeover.formula(i)}",
        e.verdict(),
        f"the {e.tier} tier in total: {units.human_bits(e.total)} "
        f"({units.human_bits(e.burst_total)} at first), on the link: {i.link.label()}",
        f"reconnects: at most {i.clients.connections} client connections x "
        f"{i.clients.handshake.label()} = {units.human_bytes(e.handshake_bytes)}, in parallel "
        "(each client on its own)",
        "no weights move: a failover starts no weight sync"
        if i.takeover.weights != "missing"
        else f"the {e.tier} tier's weights: a full copy, then its engines start (the "
        "timelines above)",
    ]


def _expect(plan: Plan) -> list[str]:
    high = settings(plan.alerts, bandwidth_high.SETTINGS)
    spike = settings(plan.alerts, failover_spike.SETTINGS)
    tier = plan.failover.egress.tier
    watches = [
        expect.Watch("InferenceBandwidthHigh", True, bandwidth_high.thresholds(plan, high)[tier],
                     high.window / 1000, high.for_ / 1000, tier),
        expect.Watch("FailoverBandwidthSpike", False, spike.threshold, spike.window / 1000,
                     spike.for_ / 1000),
    ]  # fmt: skip
    weights = plan.failover_inputs.takeover.weights
    return [expect.line(plan.failover, w) for w in watches] + [expect.quiet(weights)]


def _weights(plan: Plan) -> list[str]:
    """Where each sync tier's engines load a generation from, and what they need."""
    delta = plan.failover_inputs.rollout.delta_bytes
    rows = [
        f"standbyc: one model directory per sync tier on the shared claim; a new generation "
        f"moves the delta, {units.human_bytes(delta)} per sync tier "
        f"(model.size x weightSync.expectedDelta), and the other files that changed"
    ]
    model = PurePosixPath(plan.model_path)
    for t in plan.sync.tiers:
        loads = (
            "restart to load it (reload: restart)"
            if t.reload is None
            else f"load it while running: the Job asks its pods ({t.reload.api}, port "
            f"{t.reload.port}, through the headless Service {t.reload.service}) "
            f"{t.reload.max_unavailable} at a time (the Job's deadline allows "
            f"{t.reload.budget_s} s for the reload at worst)"
        )
        rows.append(
            f"tier {t.name}: its engines load the model directory {model} (claim "
            f"{plan.sync.claim}, subPath {t.name}, mounted at {model.parent}) and {loads}"
        )
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
            f"{verify_requirement(plan.namespace, plan.sync.verify, plan.model_name)}"
        )
    return rows


def _scenario(plan: Plan) -> str:
    t = plan.failover_inputs.takeover
    holds = {
        "current": "the current generation: Ready before the failure, they serve at once",
        "behind": "the previous generation: Ready before the failure, they serve it at once "
        "(nothing in a failover starts a weight sync; the next rollout brings them up to date)",
        "missing": "no weights: they serve only once a weight sync has brought a full copy and "
        "their engines have started",
    }[t.weights]
    rto = plan.failover.rto_ms
    return (
        f"{t.failed} serving pod(s) fail; the {t.tier} tier's {t.replicas} standby pod(s) take "
        f"their traffic, holding {holds}. Objective: "
        + (units.prom_duration(rto) if rto is not None else "none (failover.rto)")
        + ". Each failure mode is timed from what the cluster and the compiled clients do; "
        + ("gRPC clients balance round_robin over every pod's address (the compiled service "
           "config) and leave a pod when their connection to it breaks."
           if plan.failover_inputs.clients.protocol == "grpc"
           else "HTTP clients reach the pods through a proxy that routes by the Service's "
           "endpoints.")
    )  # fmt: skip


def _dashboard(plan: Plan) -> str:
    """Where the failover can be watched as it happens, against this plan."""
    if not plan.dashboard.enabled:
        return ""
    e = plan.failover.egress
    return (
        f"Watch the Grafana dashboard **standbyc: {plan.namespace}/{plan.name}** (folder "
        f"{plan.dashboard.folder}, uid `{panels.uid(plan)}`, from "
        f"`configmap-{plan.names.dashboard}.yaml`): its Failover row draws the takeover's "
        f"traffic this plan expects ({units.human_bits(e.total)} for the {e.tier} tier, "
        f"{units.human_bits(e.per_pod)} a pod) beside the egress measured; the weight sync "
        "has its own row."
    )


def _rollouts(plan: Plan) -> list[dict[str, Any]]:
    return [
        {
            "tier": r.tier,
            "total": units.human_seconds(r.seconds),
            "meanwhile": r.meanwhile,
            "storage": f"{units.human_bytes(r.storage_bytes)} over the weights claim",
            "deadline": (
                f"**its Job's deadline, {r.deadline_s} s, is shorter than its part of this "
                f"rollout, {units.human_seconds(r.job_seconds)}: the Job would be stopped "
                "before every pod serves the generation; raise weightSync.activeDeadline**"
                if r.over_deadline
                else f"its Job's part, {units.human_seconds(r.job_seconds)}, within its "
                f"deadline of {r.deadline_s} s"
            ),
            "steps": [{"name": st.name, "at": units.human_seconds(st.at), "how": st.how}
                      for st in r.steps],
        }
        for r in plan.failover.rollouts
    ]  # fmt: skip


def _inputs(plan: Plan) -> list[dict[str, str]]:
    return [
        {"name": name, "value": n.text(), "source": n.source, "where": n.where}
        for name, n in numbers(plan.failover_inputs)
    ]


def _fanout(plan: Plan) -> list[dict[str, str]]:
    return [
        {
            "label": row.label,
            "bytes": units.human_bytes(row.bytes_each),
            "store": units.human_seconds(row.seconds_store)
            + (" (its egress binds)" if row.store_binds else " (the tiers' rates bind)"),
            "object_store": units.human_seconds(row.seconds_object_store),
        }
        for row in rollout.fanout(plan.failover_inputs)
    ]


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    f = plan.failover
    c = f.comparison
    context = {
        "verdict": f.verdict(),
        # The first line a reviewer reads: a missed objective is not left to the body.
        "heading": f"{plan.namespace}/{plan.name}"
        + {True: ": objective met", False: ": OBJECTIVE MISSED", None: ""}[f.met],
        "chart": CHART,
        "scenario": _scenario(plan),
        "modes": _modes(plan),
        "takeover": _takeover(plan),
        "advice": list(f.advice),
        "expect": _expect(plan),
        "dashboard": _dashboard(plan),
        "rollouts": _rollouts(plan),
        "weights": _weights(plan),
        "store_egress": units.human_bits(plan.failover_inputs.store_egress_bps),
        "fanout": _fanout(plan),
        "claim": {"with_how": c.with_how, "without_how": c.without_how, "verdict": c.verdict()},
        "inputs": _inputs(plan),
        "numbers": derived_lines(plan.summary()),
    }
    doc = r.render_text("plan.md.j2", context)
    svg = chart.render(
        f,
        title=f"Serving traffic over one failover: {plan.namespace}/{plan.name}",
        link_bps=plan.link_bps,
    )
    return [Emitted("PLAN.md", {}, text=doc), Emitted(CHART, {}, text=svg)]
