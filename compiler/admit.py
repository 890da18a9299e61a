"""Step 2, admission: loaded data becomes a ``StandbySpec`` with located warnings, or
located errors.

pydantic reports errors by field path; ``Positions`` turns each path into
``file:line:col``. The semantic rules (the link budget, keepalive pitfall,
``for`` versus evaluation interval) run after the model
is valid, so they can rely on parsed units, and so do the warnings: what compiles but
may not do what the spec's author meant. Name lengths are checked on the
emitted objects (``compiler.decorate``), per kind.
"""

from __future__ import annotations

import difflib
import math
import types
import typing
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from compiler import alerts, engines, names, units, unset
from compiler.errors import Diagnostic, Location, SpecError
from compiler.gate import DEFAULT_KUBE_VERSIONS
from compiler.load import LoadedSpec, PathKey, Problem, dotted_path
from compiler.plan import report_bridge_ms
from compiler.spec import TIER_NAMES, StandbySpec, cron_longest_gap
from compiler.spec import json_schema as spec_schema


def _model_at(path: PathKey) -> type[BaseModel] | None:
    """The pydantic model class that owns the field at ``path`` (for suggestions)."""
    model: type[BaseModel] = alerts.STANDBY_SPEC
    for part in path:
        if isinstance(part, int):
            continue
        field = next(
            (f for n, f in model.model_fields.items() if part in (n, f.alias)),
            None,
        )
        if field is None:
            return None
        nested = _unwrap_model(field.annotation)
        if nested is None:
            return None
        model = nested
    return model


def _unwrap_model(annotation: Any) -> type[BaseModel] | None:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _unwrap_model(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            found = _unwrap_model(arg)
            if found is not None:
                return found
    return None


def _child(node: Any, part: int | str) -> tuple[bool, Any]:
    if isinstance(node, dict) and isinstance(part, str) and part in node:
        return True, node[part]
    if isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node):
        return True, node[part]
    return False, None


def _data_path(data: Any, loc: tuple[int | str, ...]) -> tuple[PathKey, bool]:
    """Keep the parts of a pydantic ``loc`` that exist in the data (drops union tags).

    Returns the path and whether the whole path exists in the data.
    """
    out: list[str | int] = []
    node = data
    parts = list(loc)
    for i, part in enumerate(parts):
        found, child = _child(node, part)
        if found:
            out.append(part)
            node = child
        elif isinstance(node, dict) and i == len(parts) - 1 and isinstance(part, str):
            out.append(part)  # a missing field: keep its name
            return tuple(out), False
        # anything else is a union/validator tag pydantic adds to the loc
    return tuple(out), True


# Fields the spec no longer takes, and why: each was read by the failover plan alone and
# changed nothing in the cluster.
REMOVED: dict[tuple[str, ...], str] = {
    ("spec", "failover", "migrationParallelism"): "clients reconnect on their own, in "
    "parallel, and nothing in the cluster read it; the plan times re-attachment from the "
    "compiled connectionPool settings (keepalive, timeouts, reconnect backoff)",
    ("spec", "connections", "migrationTime"): "clients reconnect on their own, in parallel, "
    "and nothing in the cluster read it; the plan times re-attachment from the compiled "
    "connectionPool settings (keepalive, timeouts, reconnect backoff)",
    ("spec", "failover", "drain"): "a crashed, hung or lost pod drains nothing: its requests "
    "in flight fail and clients retry them on the takeover tier (failover.retried)",
    ("spec", "failover", "failureThreshold"): "it is your readinessProbe's: write it as "
    "healthChecks.failureThreshold, beside healthChecks.interval",
    ("spec", "failover", "warmup"): "write failover.engineStart, the engine's start alone: "
    "the plan adds the model read from the claim at weightSync.claimReadRate",
}


def _message(error: Any, path: PathKey) -> str:
    kind = error["type"]
    msg: str = error["msg"]
    if msg.startswith("Value error, "):
        msg = msg[len("Value error, ") :]
    if kind == "extra_forbidden" and tuple(map(str, path)) in REMOVED:
        msg = f"{path[-1]!r} is no longer read: {REMOVED[tuple(map(str, path))]}"
    elif kind == "extra_forbidden":
        key = path[-1] if path else "?"
        model = _model_at(path[:-1])
        msg = f"unknown field {key!r}"
        if model is not None:
            allowed = sorted(f.alias or n for n, f in model.model_fields.items())
            close = difflib.get_close_matches(str(key), allowed, n=1)
            if close:
                msg += f"; did you mean {close[0]!r}?"
            else:
                msg += f"; allowed fields: {', '.join(allowed)}"
    elif (tier := _tier_message(kind, path)) is not None:
        msg = tier
    elif kind == "missing":
        msg = "required field is missing"
    elif kind != "value_error" and isinstance(error.get("input"), str | int | float | bool):
        msg = f"{msg} (got {error['input']!r})"
    return msg


def _tier_message(kind: str, path: PathKey) -> str | None:
    """standbyc's own words for a tier written wrong: how to write one, and how to turn it
    off (the validation library would speak of dictionaries and instances)."""
    if path[:2] != ("spec", "tiers") or len(path) < 3:
        return None
    name = path[2]
    off = f"replicas: 0, or {name}: null, turns the tier off"
    if len(path) == 3 and kind in ("model_type", "none_required", "model_attributes_type"):
        return f"a tier is written {{replicas: N, egress: 10Gbit/s}}; {off}"
    if path[3:] == ("replicas",) and kind == "missing":
        return f"required field is missing: how many standby pods the {name} tier runs; {off}"
    return None


Found = tuple[PathKey, str, bool]  # a problem or a warning: whether it points at the key


def _refused(data: Any, exc: ValidationError) -> list[Found]:
    """One problem per field pydantic refused: its path in the data, standbyc's message and
    whether it points at the key (an unknown field; a missing one: its parent's)."""
    seen: set[PathKey] = set()
    out: list[Found] = []
    for error in exc.errors(include_url=False):
        path, exists = _data_path(data, error["loc"])
        if path in seen:  # one message per field; union branches repeat themselves
            continue
        seen.add(path)
        out.append((path, _message(error, path), error["type"] == "extra_forbidden" or not exists))
    return out


# Where a spec writes a bandwidth; a byte unit there is read as bytes, and said once more.
BANDWIDTH_FIELDS: tuple[PathKey, ...] = (
    ("spec", "network", "link"),
    *(("spec", "tiers", t, "egress") for t in TIER_NAMES),
    ("spec", "alerts", "bandwidthHigh", "threshold"),
    *(("spec", "alerts", "bandwidthHigh", "thresholds", t) for t in TIER_NAMES),
    ("spec", "alerts", "failoverSpike", "threshold"),
    ("spec", "failover", "storeEgress"),
    ("spec", "failover", "servingEgress"),
    ("spec", "weightSync", "claimReadRate"),
)


def written_in_bytes(data: Any, path: PathKey) -> str | None:
    """What to say when the bandwidth at ``path`` is written in bytes (``3GB/s``), else None."""
    node = data
    for part in path:
        node = node.get(part) if isinstance(node, dict) else None
    if not units.in_bytes(node):
        return None
    bits = units.human_bits(units.parse_bandwidth(node))
    return (
        f"{node!r} is bytes per second, {bits}: a capital B is a byte. "
        f"If you meant bits, write {str(node).replace('B', 'b', 1).strip()}"
    )


def _link_budget(spec: StandbySpec, data: Any) -> list[Problem]:
    # Cilium limits are per pod, so a tier takes replicas x egress of the link.
    s = spec.spec
    parts = [(t.replicas, t.egress_bps) for _, t in s.tiers.items() if t.replicas]
    total = sum(r * e for r, e in parts)
    if total <= s.network.link:
        return []
    terms = " + ".join(f"{r} x {units.human_bits(e)}" for r, e in parts)
    # A byte unit multiplies a bandwidth by eight: the likeliest reason it no longer fits.
    hints = [
        f"{dotted_path(path)}: {hint}"
        for path in BANDWIDTH_FIELDS[: 1 + len(TIER_NAMES)]
        if (hint := written_in_bytes(data, path))
    ]
    return [
        (
            ("spec", "tiers"),
            f"tier egress adds up to {terms} = {units.human_bits(total)}, "
            f"which exceeds spec.network.link {units.human_bits(s.network.link)}"
            + "".join(f"; {h}" for h in hints),
        )
    ]


def _tiers(spec: StandbySpec) -> list[Problem]:
    return [
        (
            ("spec", "tiers", name, "egress"),
            f"a tier with replicas needs egress, its per-pod egress limit (such as 10Gbit/s); "
            f"replicas: 0, or {name}: null, turns the tier off",
        )
        for name, tier in spec.spec.tiers.items()
        if tier.replicas and tier.egress is None
    ]


def _keepalive(spec: StandbySpec) -> list[Problem]:
    g = spec.spec.connection_pool.grpc
    where = ("spec", "connectionPool", "grpc")
    out: list[Problem] = []
    if g.keepalive_time < g.server_min_ping_interval:
        out.append(
            (
                (*where, "keepaliveTime"),
                f"client keepalive {units.prom_duration(g.keepalive_time)} is shorter than the "
                f"server's minimum ping interval {units.prom_duration(g.server_min_ping_interval)} "
                "(serverMinPingInterval); the server would answer GOAWAY too_many_pings and drop "
                "connections",
            )
        )
    if g.keepalive_timeout >= g.keepalive_time:
        out.append(
            (
                (*where, "keepaliveTimeout"),
                f"keepalive timeout {units.prom_duration(g.keepalive_timeout)} must be shorter "
                f"than keepaliveTime {units.prom_duration(g.keepalive_time)}",
            )
        )
    return out


def _alert_timing(spec: StandbySpec) -> list[Problem]:
    return alerts.timing_problems(spec.spec.alerts)


def _lists_and_names(spec: StandbySpec) -> list[Problem]:
    s = spec.spec
    out: list[Problem] = []
    if len(set(s.weight_sync.tiers)) != len(s.weight_sync.tiers):
        out.append((("spec", "weightSync", "tiers"), "a tier is listed twice"))
    if len(set(s.qos.outputs)) != len(s.qos.outputs):
        out.append((("spec", "qos", "outputs"), "an output is listed twice"))
    takeover = s.failover.takeover
    others = [name for name, t in s.tiers.items() if t.replicas and name != takeover]
    if s.tiers.get(takeover).replicas == 0 and others:
        instead = f"set failover.takeover: {others[0]}"
        # "no replicas" when the tier is written with 0; "not written" when left out or null
        state = "has no replicas" if getattr(s.tiers, takeover) else "is off (not written)"
        if "takeover" in s.failover.model_fields_set:
            out.append(
                (
                    ("spec", "failover", "takeover"),
                    f"the {takeover} tier {state}, so it cannot take over; {instead} "
                    f"(tiers with replicas: {', '.join(others)})",
                )
            )
        else:  # the user never wrote takeover: point at what they wrote
            out.append(
                (
                    ("spec", "tiers", takeover, "replicas"),
                    f"the {takeover} tier {state}, but a failover is planned onto it "
                    f"(failover.takeover defaults to {takeover}): give it replicas, or "
                    f"{instead}",
                )
            )
    if not any(t.replicas for _, t in s.tiers.items()):
        out.append(
            (("spec", "tiers"), "every tier has 0 replicas; there is nothing to fail over to")
        )
    return out


def _label_names(spec: StandbySpec) -> list[Problem]:
    """Two pod label keys that kube-state-metrics turns into the same Prometheus label would
    make the alerts' selectors ambiguous."""
    engine = spec.spec.engine
    seen: dict[str, str] = {}
    keys = [(("spec", "engine", "selector", k), k) for k in engine.selector]
    for path, key in [*keys, (("spec", "engine", "tierLabel"), engine.tier_label)]:
        name = names.ksm_label(key)
        if name in seen and seen[name] != key:
            return [
                (
                    path,
                    f"pod label keys {seen[name]!r} and {key!r} both become {name} in "
                    "kube-state-metrics (sanitised, snake_case, lower case); rename one",
                )
            ]
        seen[name] = key
    return []


def _job_deadline(spec: StandbySpec) -> list[Problem]:
    """A weight-sync Job's deadline must cover its tier's whole reload at worst, or the
    Job could be stopped with pods still paused or unloaded."""
    s = spec.spec
    written = s.weight_sync.active_deadline
    if written is None:
        return []
    out: list[Problem] = []
    for name in dict.fromkeys(s.weight_sync.tiers):
        tier = s.tiers.get(name)
        cfg = tier.reload or s.engine.reload
        if cfg.api == "restart" or not tier.replicas:
            continue
        swap = engines.UNLOAD_FIRST if cfg.swap == "unloadFirst" else ""
        size = engines.max_unavailable(cfg.max_unavailable, tier.replicas)
        reload_s = math.ceil(engines.tier_seconds(
            cfg.api, cfg.timeout / 1000, tier.replicas, size, swap))  # fmt: skip
        need = reload_s + engines.REPORT_SECONDS + engines.MIN_SYNC_SECONDS
        if written // 1000 < need:
            waves = engines.waves(tier.replicas, size)
            out.append(
                (
                    ("spec", "weightSync", "activeDeadline"),
                    f"{units.prom_duration(written)} is shorter than the {name} tier's "
                    f"weight-sync Job needs: its reload may take {reload_s} s at worst "
                    f"({waves} wave(s) of {size} pod(s), each step up to reload.timeout "
                    f"{units.prom_duration(cfg.timeout)}), plus {engines.REPORT_SECONDS} s "
                    f"to report and {engines.MIN_SYNC_SECONDS} s for the downloads: "
                    f"at least {units.prom_duration(need * 1000)}; raise it, lower "
                    "reload.timeout, or leave it unset (computed)",
                )
            )
    return out


NATIVE_MINOR = 36  # MutatingAdmissionPolicy is served at admissionregistration.k8s.io/v1


def _native_admission(spec: StandbySpec) -> list[Problem]:
    """Kubernetes' own admission policies need MutatingAdmissionPolicy at v1 (GA in 1.36;
    beta and off by default in 1.34 and 1.35) in every minor the spec targets."""
    s = spec.spec
    if "admissionPolicy" not in s.qos.outputs:
        return []
    written = s.validation.kubernetes_versions
    versions = list(written or DEFAULT_KUBE_VERSIONS)
    older = [v for v in versions if int(v.split(".")[1]) < NATIVE_MINOR]
    if not older:
        return []
    where = (
        "validation.kubernetesVersions"
        if written
        else f"the default matrix ({', '.join(DEFAULT_KUBE_VERSIONS)}; validation."
        "kubernetesVersions sets the spec's own)"
    )
    index = s.qos.outputs.index("admissionPolicy")
    return [
        (
            ("spec", "qos", "outputs", index),
            f"admissionPolicy needs MutatingAdmissionPolicy at admissionregistration.k8s.io/v1, "
            f"which Kubernetes serves from 1.36; {where} includes {', '.join(older)}: target "
            "1.36 and later only, or use kyverno there",
        )
    ]


SEMANTIC_CHECKS = (_tiers, _keepalive, _alert_timing, _lists_and_names, _label_names,
                   _job_deadline, _native_admission)  # fmt: skip


def _warnings(spec: StandbySpec, data: Any) -> list[Problem]:
    """What compiles but may not do what the spec's author meant."""
    s = spec.spec
    ws = s.weight_sync
    out: list[Problem] = []
    metadata = data.get("metadata")
    if isinstance(metadata, dict) and "namespace" not in metadata:
        out.append(
            (("metadata",), "metadata.namespace is not set, so the objects go to the namespace "
             "default")
        )  # fmt: skip
    if not s.alerts.rule_labels:
        out.append(
            (("spec", "alerts", "ruleLabels"), "spec.alerts.ruleLabels is empty: a Prometheus "
             "with a ruleSelector (as kube-prometheus-stack sets one, release: <its release>) "
             "does not load the PrometheusRule")
        )  # fmt: skip
    schedule = ws.report.schedule if ws.report.pushgateway else None
    if schedule is not None and cron_longest_gap(schedule) is None:
        out.append(
            (("spec", "weightSync", "report", "schedule"), f"weightSync.report.schedule "
             f"{schedule!r} runs days apart: after a Pushgateway restart the weight alerts keep "
             f"the last pushed values for {units.prom_duration(report_bridge_ms(schedule))} "
             "only, then StandbyWeightsUnreported pages until the next report")
        )  # fmt: skip
    out += [(path, hint) for path in BANDWIDTH_FIELDS if (hint := written_in_bytes(data, path))]
    out += alerts.bandwidth_high.problems(s)
    out += unset.problems(data)
    synced = any(t.replicas and name in ws.tiers for name, t in s.tiers.items())
    if synced and ws.verify is None:
        out.append(
            (("spec", "weightSync"), "spec.weightSync.verify is not set: the weight-sync Jobs "
             "swap in whatever the store serves, so anyone who can write the store (or answer "
             "in its place) changes what is served; sign generations (weights publish "
             "--sign-key) and set verify")
        )  # fmt: skip
    return out


@dataclass(frozen=True)
class Admitted:
    """A spec admitted: its model and data, where its name is written (what a problem
    with the names derived from it points at) and its warnings."""

    spec: StandbySpec
    data: dict[str, Any]
    name_location: Location
    warnings: tuple[Diagnostic, ...] = ()


def _judged(data: Any) -> tuple[StandbySpec | None, list[Found], list[Found]]:
    """The model (None: pydantic refused the data), what is wrong with the spec, and what
    to warn about (nothing while something is wrong)."""
    try:
        spec = alerts.STANDBY_SPEC.model_validate(data)
    except ValidationError as exc:
        return None, _refused(data, exc), []
    problems = [*_link_budget(spec, data), *(p for check in SEMANTIC_CHECKS for p in check(spec))]
    warnings = [] if problems else _warnings(spec, data)
    return spec, [(p, m, False) for p, m in problems], [(p, m, False) for p, m in warnings]


def json_schema() -> dict[str, Any]:
    """The JSON Schema of what admission takes (``standbyc schema``)."""
    return spec_schema(alerts.STANDBY_SPEC)


def _written_order(d: Diagnostic) -> tuple[int, int]:
    return d.location.line or 0, d.location.column or 0


def admit(loaded: LoadedSpec) -> Admitted:
    """The spec's model and its warnings, or every problem it has: all located at once."""
    spec, problems, warnings = _judged(loaded.data)
    where = loaded.positions.locate
    located = [
        Diagnostic(where(loaded.source, path, prefer_key=key), message)
        for path, message, key in [*problems, *warnings]
    ]
    if spec is None:  # pydantic's problems, in the order they are written
        raise SpecError(
            sorted(located, key=lambda d: (d.location.line or 0, d.location.column or 0))
        )
    if problems:
        raise SpecError(located)
    name = where(loaded.source, ("metadata", "name"))
    return Admitted(spec, loaded.data, name, tuple(located))
