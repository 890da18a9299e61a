"""Kubernetes' own admission policies for the tiers' QoS (``qos.outputs: admissionPolicy``):
a MutatingAdmissionPolicy that puts Cilium's bandwidth annotations on each tier's Pods as
they are created, exactly as the Kyverno policy does, and a ValidatingAdmissionPolicy that
refuses an update leaving a tier Pod's annotations other than its tier's, each with the
binding that puts it in force. Both select the Pods the Kyverno policy selects: the spec's
namespace, the engine's labels and a tier label naming one of the spec's tiers.

tests/gate/test_admission_policy.py proves them on the real API server, and against the
Kyverno CLI on the same Pods.
"""

from __future__ import annotations

from compiler.emitted import Emitted
from compiler.plan import Plan
from compiler.render.base import Renderer, filename

OUTPUT = "admissionPolicy"
EGRESS = "kubernetes.io/egress-bandwidth"  # Cilium's Bandwidth Manager, bit/s quantity
PRIORITY = "bandwidth.cilium.io/priority"  # Cilium's Network QoS class


def _cel(value: str) -> str:
    """A CEL string literal; label keys, quantities and classes hold no quote or backslash."""
    return "'" + value + "'"


def _value(obj: str, field: str, key: str) -> str:
    """``key``'s value in ``obj.metadata.<field>``, or '' when there is none (a Pod may have
    no annotations, an update may take the tier label away)."""
    meta = f"{obj}.metadata"
    has = f"has({meta}.{field}) && {key} in {meta}.{field}"
    return f"({has} ? {meta}.{field}[{key}] : '')"


def expressions(plan: Plan) -> dict[str, str]:
    """The policies' CEL: the tier's annotations, the mutation, the update check."""
    label = _cel(plan.engine.tier_label)
    tier = _value("object", "labels", label)
    old_tier = _value("oldObject", "labels", label)
    table = ", ".join(
        f"{_cel(t.name)}: {{{_cel(EGRESS)}: {_cel(t.egress_quantity)}, "
        f"{_cel(PRIORITY)}: {_cel(t.priority)}}}"
        for t in plan.tiers
    )
    tiers = "[" + ", ".join(_cel(t.name) for t in plan.tiers) + "]"
    keys = (_cel(EGRESS), _cel(PRIORITY))
    return {
        # Looked up only where a tier Pod is matched: the key is always in the table.
        "qos": f"{{{table}}}[{tier}]",
        "apply": (
            "Object{metadata: Object.metadata{annotations: {"
            + ", ".join(f"{k}: variables.qos[{k}]" for k in keys)
            + "}}}"
        ),
        "a_tier_pod": f"{tier} in {tiers}",
        "changed": " || ".join(
            [f"{tier} != {old_tier}"]
            + [
                f"{_value('object', 'annotations', k)} != {_value('oldObject', 'annotations', k)}"
                for k in keys
            ]
        ),
        "valid": " && ".join(
            f"{_value('object', 'annotations', k)} == variables.qos[{k}]" for k in keys
        ),
        "message": _message(plan, tier, keys),
    }


def _message(plan: Plan, tier: str, keys: tuple[str, str]) -> str:
    """What a refused update is told: the annotations its tier carries, and who says so."""
    wants = " + ', ' + ".join(f"{k} + '=' + variables.qos[{k}]" for k in keys)
    return (
        f"'a Pod of {plan.engine.tier_label}=' + {tier} + ' carries ' + {wants} + "
        f"' (standbyc spec {plan.namespace}/{plan.name}, qos.outputs admissionPolicy): "
        "change the tier label and both annotations together, or recreate the Pod'"
    )


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    if OUTPUT not in plan.qos_outputs:
        return []
    name = plan.names.admission_policy
    context = {
        "name": name,
        "namespace": plan.namespace,
        "engine": plan.engine.selector,
        "tier_label": plan.engine.tier_label,
        "tiers": [t.name for t in plan.tiers],
        **expressions(plan),
    }
    out = []
    for kind in (
        "MutatingAdmissionPolicy",
        "MutatingAdmissionPolicyBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ):
        obj = r.render(f"{kind.lower()}.yaml.j2", context, kind)
        out.append(Emitted(filename(kind, name), obj))
    return out
