"""The one table of the kinds standbyc emits.

Each row says everything the pipeline needs to know about a kind: its apiVersion,
its place in the apply order (the row's position), its Argo CD sync wave, how long
its name may be, whether it is namespaced, where kubeconform's schema for it comes
from, whether standbyc ships its CRD, and which top-level fields a rendered object
may have. Ordering, waves, the CRD set, the name checks, the shape checks and the
schema build all read this table; nothing else names a kind.
"""

from __future__ import annotations

from dataclasses import dataclass

KUBERNETES = "kubernetes"  # schema from the Kubernetes JSON schemas (kubernetes-validate)
STANDBYC = "standbyc"  # schema from the CRD standbyc ships (``crd`` below)
WAVE_ANNOTATION = "argocd.argoproj.io/sync-wave"
SYNC_OPTIONS_ANNOTATION = "argocd.argoproj.io/sync-options"
SUBDOMAIN = 253  # the longest DNS-1123 subdomain, what most kinds take as a name
KYVERNO_NOT_YET = (
    "kept on purpose for now: its successor, MutatingPolicy (policies.kyverno.io/v1), is "
    "served only by Kyverno 1.17 and later, and ClusterPolicy by every release, 1.19 "
    "included; see the README"
)


@dataclass(frozen=True)
class Kind:
    kind: str
    api_version: str
    # Argo CD sync wave. None: no wave (hooks order themselves, and files that are
    # not applied have none).
    wave: int | None
    # What metadata.name may be: most kinds take a DNS-1123 subdomain (253 characters);
    # ``name_why`` says where a shorter limit comes from, ``name_letter_first`` that the
    # name must start with a letter (a DNS-1035 label).
    name_limit: int = SUBDOMAIN
    name_why: str = ""
    name_letter_first: bool = False
    namespaced: bool = True
    # Where kubeconform's schema comes from: KUBERNETES, STANDBYC, or the Go module of a
    # CRD source pinned in compiler/data/pins.json.
    schema: str = KUBERNETES
    crd: str | None = None  # compiler/data/<crd>: a CRD standbyc ships and emits to crds/
    applied: bool = True  # listed in kustomization.yaml, so Argo CD applies it
    fields: tuple[str, ...] = ("spec",)  # top-level keys besides apiVersion, kind, metadata
    decorated: bool = True  # gets namespace, common labels and annotations after rendering
    # Cluster-wide and the same for every spec (a CRD): in the Argo CD plugin's ``PART=cluster``
    # stream only, so one Application per cluster owns it, never one per spec.
    shared: bool = False
    # Argo CD sync options on every object of the kind (argocd.argoproj.io/sync-options).
    sync_options: str | None = None
    # Why standbyc still emits a kind its API server marks deprecated; the gate adds it to
    # the API server's deprecation warning (``standbyc validate --apiserver``).
    deprecation: str = ""

    @property
    def name_reason(self) -> str:
        """Why names of this kind have their limit, for messages ("" when unknown)."""
        return self.name_why or ("a DNS-1123 subdomain" if self.name_limit == SUBDOMAIN else "")

    @property
    def top_keys(self) -> frozenset[str]:
        return frozenset(("apiVersion", "kind", "metadata", *self.fields))


# Rows in apply order: what others depend on comes first.
KINDS: tuple[Kind, ...] = (
    # Never pruned or deleted with an Application: that would delete every object of the
    # kind on the cluster, those of other specs and other Applications included.
    Kind(
        "CustomResourceDefinition",
        "apiextensions.k8s.io/v1",
        wave=-2,
        namespaced=False,
        shared=True,
        sync_options="Prune=false,Delete=false",
    ),
    Kind("ServiceAccount", "v1", wave=-1, fields=("automountServiceAccountToken",)),
    # The policy must exist before the tier Pods are (re)created to mutate them.
    Kind(
        "ClusterPolicy",
        "kyverno.io/v1",
        wave=-1,
        name_limit=63,
        name_why="Kyverno refuses longer policy names",
        namespaced=False,
        schema="github.com/kyverno/kyverno",
        deprecation=KYVERNO_NOT_YET,
    ),
    # Kubernetes' own admission policies (1.36+), before the tier Pods as the Kyverno policy
    # is; each policy before the binding that puts it in force.
    *(
        Kind(kind, "admissionregistration.k8s.io/v1", wave=-1, namespaced=False)
        for kind in (
            "MutatingAdmissionPolicy",
            "MutatingAdmissionPolicyBinding",
            "ValidatingAdmissionPolicy",
            "ValidatingAdmissionPolicyBinding",
        )
    ),
    Kind("ConfigMap", "v1", wave=0, fields=("data",)),
    # Its name becomes a DNS name in the cluster: a DNS-1035 label.
    Kind(
        "Service",
        "v1",
        wave=0,
        name_limit=63,
        name_why="a DNS-1035 label",
        name_letter_first=True,
    ),
    Kind("NetworkPolicy", "networking.k8s.io/v1", wave=0),
    Kind(
        "CiliumEgressQoS",
        "cilium.io/v2",
        wave=0,
        schema=STANDBYC,
        crd="crds/ciliumegressqoses.cilium.io.yaml",
    ),
    Kind("DestinationRule", "networking.istio.io/v1", wave=0, schema="istio.io/api"),
    Kind(
        "PrometheusRule",
        "monitoring.coreos.com/v1",
        wave=0,
        schema="github.com/prometheus-operator/prometheus-operator",
    ),
    # Loads the dashboard's ConfigMap (configMapRef), applied before it in the same wave.
    Kind(
        "GrafanaDashboard",
        "grafana.integreatly.org/v1beta1",
        wave=0,
        schema="github.com/grafana/grafana-operator/v5",
    ),
    Kind("Deployment", "apps/v1", wave=0),
    Kind(
        "CronJob",
        "batch/v1",
        wave=1,
        name_limit=52,
        name_why="the API server appends 11 characters to name each of its Jobs",
    ),
    Kind(
        "Job",
        "batch/v1",
        wave=None,
        name_limit=63,
        name_why="it becomes the job-name label of its Pods, and a label value has 63 at most",
    ),
    # kustomize files: read by kustomize, never applied themselves.
    Kind(
        "Component",
        "kustomize.config.k8s.io/v1alpha1",
        wave=None,
        namespaced=False,
        applied=False,
        fields=("patches",),
        decorated=False,
    ),
    Kind(
        "Kustomization",
        "kustomize.config.k8s.io/v1beta1",
        wave=None,
        namespaced=False,
        applied=False,
        fields=("resources",),
        decorated=False,
    ),
)

BY_NAME: dict[str, Kind] = {k.kind: k for k in KINDS}


def get(kind: str) -> Kind:
    """The row for ``kind``; a kind without a row is a bug in a renderer."""
    try:
        return BY_NAME[kind]
    except KeyError:
        raise KeyError(f"kind {kind!r} has no row in compiler.kinds.KINDS") from None


def rank(kind: str) -> int:
    """Position in the apply order; data files (no kind) come after every kind."""
    row = BY_NAME.get(kind)
    return KINDS.index(row) if row is not None else len(KINDS)


def schema_kinds(source: str) -> tuple[str, ...]:
    """The kinds whose kubeconform schema comes from ``source`` (a CRD module, or STANDBYC)."""
    return tuple(k.kind for k in KINDS if k.schema == source)


def shipped_crds() -> dict[str, str]:
    """Kind -> the CRD file (under compiler/data) that standbyc ships for it."""
    return {k.kind: k.crd for k in KINDS if k.crd is not None}
