"""Kyverno ClusterPolicy that puts Cilium's bandwidth annotations on tier Pods, and the
``kyverno test`` that proves it with the real Kyverno engine (the validation gate runs it).

The test, in ``tests/kyverno/``: a Pod of each tier gets exactly its tier's annotations;
the primary (the engine's labels without a tier), a Pod of the tier in another namespace,
a Pod with the tier label but not the engine's labels, and a Deployment of the tier's pods
(no controller rule is generated, because the rules set a selector) are left alone by
every rule.
"""

from __future__ import annotations

from typing import Any

from compiler.emitted import Emitted
from compiler.names import TEST_OTHER_NAMESPACE as OTHER_NAMESPACE
from compiler.plan import Plan
from compiler.render.base import Renderer, filename

KIND = "ClusterPolicy"
TESTS = "tests/kyverno"
TEST_IMAGE = "registry.example.com/engine:test"


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    if "kyverno" not in plan.qos_outputs:
        return []
    name = plan.names.kyverno_policy
    context = {"name": name, "namespace": plan.namespace, "tiers": plan.tiers}
    obj = r.render("kyverno-clusterpolicy.yaml.j2", context, KIND)
    policy_file = filename(KIND, name)
    return [Emitted(policy_file, obj), *_tests(plan, name, policy_file)]


def _pod(name: str, namespace: str, labels: dict[str, str], **annotations: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "labels": labels}
    if annotations:
        meta["annotations"] = annotations
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": meta,
        "spec": {"containers": [{"name": "engine", "image": TEST_IMAGE}]},
    }


def _tests(plan: Plan, policy: str, policy_file: str) -> list[Emitted]:
    ns = plan.namespace
    engine, tier_key = plan.engine.selector, plan.engine.tier_label
    files: list[Emitted] = []
    mutated: dict[str, str] = {}  # rule -> the Pod it must mutate
    untouched: list[tuple[str, str]] = []  # (kind, name) no rule may touch
    for tier in plan.tiers:
        pod = f"standby-{tier.name}-0"
        files.append(Emitted(f"{TESTS}/pod-{pod}.yaml", _pod(pod, ns, tier.selector)))
        patched = _pod(
            pod,
            ns,
            tier.selector,
            **{
                "kubernetes.io/egress-bandwidth": tier.egress_quantity,
                "bandwidth.cilium.io/priority": tier.priority,
            },
        )
        files.append(Emitted(f"{TESTS}/patched-pod-{pod}.yaml", patched))
        mutated[f"egress-{tier.name}"] = pod
    hot = plan.tiers[0]
    others = [
        ("primary-0", ns, dict(engine)),
        (f"standby-{hot.name}-other-namespace", OTHER_NAMESPACE, dict(hot.selector)),
    ]
    if engine:
        others.append((f"other-app-{hot.name}-0", ns, {tier_key: hot.name}))
    for pod, namespace, labels in others:
        files.append(Emitted(f"{TESTS}/pod-{pod}.yaml", _pod(pod, namespace, labels)))
        untouched.append(("Pod", pod))
    deployment = f"standby-{hot.name}"
    files.append(
        Emitted(
            f"{TESTS}/deployment-{deployment}.yaml",
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": deployment, "namespace": ns, "labels": hot.selector},
                "spec": {
                    "selector": {"matchLabels": hot.selector},
                    "template": {
                        "metadata": {"labels": hot.selector},
                        "spec": _pod("x", ns, {})["spec"],
                    },
                },
            },
        )
    )
    untouched.append(("Deployment", deployment))

    results: list[dict[str, Any]] = []
    for rule, pod in mutated.items():
        results.append(
            {
                "policy": policy,
                "rule": rule,
                "kind": "Pod",
                "resources": [pod],
                "patchedResources": f"patched-pod-{pod}.yaml",
                "result": "pass",
            }
        )
        skipped = [p for p in mutated.values() if p != pod]
        for kind in ("Pod", "Deployment"):
            names = [n for k, n in untouched if k == kind] + (skipped if kind == "Pod" else [])
            results.append(
                {"policy": policy, "rule": rule, "kind": kind, "resources": names, "result": "skip"}
            )
    resources = sorted(e.relpath.removeprefix(f"{TESTS}/") for e in files
                       if not e.relpath.startswith(f"{TESTS}/patched-"))  # fmt: skip
    test = {
        "apiVersion": "cli.kyverno.io/v1alpha1",
        "kind": "Test",
        "metadata": {"name": policy},
        "policies": [f"../../{policy_file}"],
        "resources": resources,
        "results": results,
    }
    return [*files, Emitted(f"{TESTS}/kyverno-test.yaml", test)]
