"""The API server's own verdict: every object server-side dry-run by a real kube-apiserver.

kubeconform checks shapes against schemas. It does not run the API server's validation
(a selector that does not match its template, a name too long for its kind, a schedule
that is not one, a duplicated port), the CEL rules of the CRDs the objects are checked
against (``x-kubernetes-validations``), or what an API server warns about. So, when asked
(``standbyc validate --apiserver``, ``compile --apiserver``, ``STANDBYC_APISERVER=on``),
the gate starts a throwaway control plane (``compiler.gate.controlplane``: etcd and one
kube-apiserver per Kubernetes version, by emulation), installs the CRDs of the kinds the
objects use (from the pinned sources the schemas come from, and standbyc's own), creates
their namespaces, and sends each object as a server-side apply with ``dryRun=All`` and
``fieldValidation=Strict``. A refusal is a gate error naming the file, the object and the
server's message; a warning is a gate warning. Nothing is stored.
"""

from __future__ import annotations

import os
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from ruamel.yaml import YAML

from compiler import kinds, tools
from compiler.errors import ToolFailed
from compiler.gate import crd as crdconv
from compiler.gate import pins as pinfile
from compiler.gate import schemas
from compiler.gate.controlplane import (
    APISERVER,
    EMULATED_BACK,
    ETCD,
    READY_WAIT,
    ApiServer,
    ControlPlane,
    Response,
    emulable,
    stop_all,
)
from compiler.gate.promtool import Outcome
from compiler.gate.report import WARNING, Finding

TOOL = APISERVER
MANAGER = "standbyc"
ENV = "STANDBYC_APISERVER"  # "on": every gate run asks the API server too
_CRD_API = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def asked(flag: bool | None) -> bool:
    """Whether the gate runs the API server: the flag, else ``STANDBYC_APISERVER``."""
    if flag is not None:
        return flag
    return os.environ.get(ENV, "").lower() in ("1", "on", "true", "yes")


def missing() -> list[str]:
    """The programs the API server check needs that are not installed."""
    return [name for name in (APISERVER, ETCD) if tools.find(name) is None]


@dataclass(frozen=True)
class Item:
    """One object to dry-run, and the file it came from (as the report shows it)."""

    file: str
    obj: dict[str, Any]

    @property
    def kind(self) -> str:
        return str(self.obj.get("kind", ""))

    @property
    def name(self) -> str:
        return str((self.obj.get("metadata") or {}).get("name", ""))

    @property
    def namespace(self) -> str | None:
        row = kinds.BY_NAME.get(self.kind)
        if row is not None and not row.namespaced:
            return None
        return str((self.obj.get("metadata") or {}).get("namespace") or "default")

    def finding(self, message: str, pointer: str = "", **kw: Any) -> Finding:
        return Finding(self.file, self.kind, self.name, pointer, message, TOOL, **kw)


def items(documents: Iterable[tuple[str, Sequence[Any]]]) -> list[Item]:
    """Every API object among (file, its documents): kustomize's own files are not."""
    out: list[Item] = []
    for file, docs in documents:
        for doc in docs:
            if not isinstance(doc, dict) or "kind" not in doc:
                continue
            row = kinds.BY_NAME.get(str(doc["kind"]))
            if row is not None and not row.applied:
                continue
            out.append(Item(file, doc))
    return out


def _api_base(api_version: str) -> str:
    return "/api/v1" if api_version == "v1" else f"/apis/{api_version}"


def _pointer(field_path: str) -> str:
    """``spec.ports[1].port`` -> ``/spec/ports/1/port`` (the API server's field path as
    the JSON pointer the other validators give)."""
    text = field_path.replace("[", ".").replace("]", "")
    return "/" + "/".join(p for p in text.split(".") if p) if text else ""


class Session:
    """What one API server needs before it can judge objects: the CRDs installed and
    established, the namespaces, and which resource serves each kind."""

    def __init__(self, server: ApiServer) -> None:
        self.server = server
        self._resources: dict[str, dict[str, tuple[str, bool]] | None] = {}

    def resources(self, api_version: str) -> dict[str, tuple[str, bool]] | None:
        """Kind -> (resource, namespaced) that the server serves in ``api_version``."""
        if api_version not in self._resources:
            reply = self.server.request("GET", _api_base(api_version))
            found = None
            if reply.status == 200 and isinstance(reply.body, dict):
                found = {
                    r["kind"]: (r["name"], bool(r.get("namespaced")))
                    for r in reply.body.get("resources", [])
                    if "/" not in r["name"]
                }
            self._resources[api_version] = found
        return self._resources[api_version]

    def apply(self, path: str, obj: dict[str, Any]) -> None:
        """Create or update one object for real (the setup, not a verdict)."""
        query = urllib.parse.urlencode({"fieldManager": f"{MANAGER}-setup", "force": "true"})
        reply = self.server.request("PATCH", f"{path}?{query}", obj, "application/apply-patch+yaml")
        if reply.status not in (200, 201):
            raise ToolFailed(f"kube-apiserver refused {path}: {_message(reply)}")

    def install_crds(self, crds: Sequence[dict[str, Any]]) -> None:
        for doc in crds:
            self.apply(f"{_CRD_API}/{doc['metadata']['name']}", doc)
        for doc in crds:
            self._wait_served(doc)

    def _wait_served(self, crd: dict[str, Any]) -> None:
        """Until the CRD is established and discovery lists its kind (a CRD's objects are
        refused before that; waiting, not guessing, keeps the verdict off the clock)."""
        group, kind = crd["spec"]["group"], crd["spec"]["names"]["kind"]
        versions = [v["name"] for v in crd["spec"]["versions"] if v.get("served")]
        deadline = time.monotonic() + READY_WAIT
        while time.monotonic() < deadline:
            reply = self.server.request("GET", f"{_CRD_API}/{crd['metadata']['name']}")
            body = reply.body if isinstance(reply.body, dict) else {}
            conditions = (body.get("status") or {}).get("conditions") or []
            established = any(
                c.get("type") == "Established" and c.get("status") == "True" for c in conditions
            )
            if established:
                self._resources.clear()
                if all(kind in (self.resources(f"{group}/{v}") or {}) for v in versions):
                    return
            time.sleep(0.1)
        raise ToolFailed(
            f"kube-apiserver (emulating {self.server.version}) did not serve {kind} "
            f"({group}) within {READY_WAIT:g} s of installing its CRD"
        )

    def create_namespaces(self, names: Iterable[str]) -> None:
        """Each namespace, with the ``default`` ServiceAccount a cluster's controllers would
        add (a Pod without one is refused; no controller runs here)."""
        for ns in sorted(set(names)):
            self.apply(f"/api/v1/namespaces/{ns}", _namespace(ns))
            account = {"apiVersion": "v1", "kind": "ServiceAccount",
                       "metadata": {"name": "default", "namespace": ns}}  # fmt: skip
            self.apply(f"/api/v1/namespaces/{ns}/serviceaccounts/default", account)

    def dry_run(self, item: Item) -> list[Finding]:
        """The server's verdict on ``item``: nothing, its refusal, or its warnings."""
        version = (self.server.version,)
        api_version = str(item.obj.get("apiVersion", ""))
        served = self.resources(api_version) or {}
        if item.kind not in served:
            return [
                item.finding(
                    f"the API server serves no {item.kind} in {api_version or '(no apiVersion)'}",
                    kube_versions=version,
                )
            ]
        resource, namespaced = served[item.kind]
        path = _api_base(api_version)
        if namespaced:
            path += f"/namespaces/{urllib.parse.quote(item.namespace or 'default', safe='')}"
        path += f"/{resource}/{urllib.parse.quote(item.name, safe='')}"
        query = urllib.parse.urlencode(
            {"fieldManager": MANAGER, "fieldValidation": "Strict", "dryRun": "All",
             "force": "true"}
        )  # fmt: skip
        reply = self.server.request("PATCH", f"{path}?{query}", item.obj,
                                    "application/apply-patch+yaml")  # fmt: skip
        out = [
            item.finding(_annotated(text, item), severity=WARNING, kube_versions=version)
            for text in reply.warnings
        ]
        if reply.status not in (200, 201):
            out.append(item.finding(_message(reply), _cause(reply), kube_versions=version))
        return out


def _namespace(name: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}


def _message(reply: Response) -> str:
    body = reply.body
    if isinstance(body, dict) and body.get("message"):
        return f"{body['message']} (HTTP {reply.status})"
    return f"HTTP {reply.status}: {str(body).strip()[:500]}"


def _cause(reply: Response) -> str:
    """The field the server blames, as a JSON pointer, when it blames exactly one."""
    body = reply.body if isinstance(reply.body, dict) else {}
    fields = {c.get("field", "") for c in (body.get("details") or {}).get("causes") or []}
    return _pointer(fields.pop()) if len(fields) == 1 else ""


def _annotated(warning: str, item: Item) -> str:
    """A warning as the server gave it; a deprecation of a kind standbyc still emits
    on purpose says why (``Kind.deprecation`` in ``compiler.kinds``)."""
    row = kinds.BY_NAME.get(item.kind)
    if row is None or not row.deprecation or " is deprecated" not in warning:
        return warning
    return f"{warning} (standbyc: {row.deprecation})"


def crds_for(used: set[str], pins: pinfile.Pins) -> list[dict[str, Any]]:
    """The CRDs of the kinds in ``used``, from the pinned sources (the ones the offline
    schemas are built from, read offline from Go's module cache) and standbyc's own."""
    out: list[dict[str, Any]] = []
    for source in pins.crds:
        wanted = used & set(source.kinds)
        if not wanted:
            continue
        text = schemas.crd_source_text(source, allow_network=False)
        for doc in crdconv.iter_crds(list(YAML(typ="safe").load_all(text))):
            if doc["spec"]["names"]["kind"] in wanted:
                out.append(dict(doc))
    return out


def judge(plane: ControlPlane, objects: Sequence[Item], pins: pinfile.Pins) -> list[Finding]:
    """Every object at every version of ``plane``: its findings, in object order."""
    used = {item.kind for item in objects}
    crds = crds_for(used, pins)
    namespaces = {ns for item in objects if (ns := item.namespace) is not None}

    def one(server: ApiServer) -> list[list[Finding]]:
        session = Session(server)
        session.install_crds(crds)
        session.create_namespaces(namespaces)
        return [session.dry_run(item) for item in objects]

    with ThreadPoolExecutor(max_workers=max(1, len(plane.servers))) as pool:
        per_version = list(pool.map(one, plane.servers.values()))
    return [f for i in range(len(objects)) for found in per_version for f in found[i]]


def binary_minor(pins: pinfile.Pins) -> int:
    return int(pins.tools[APISERVER].version.removeprefix("v").split(".")[1])


def run(
    documents: Iterable[tuple[str, Sequence[Any]]], versions: Sequence[str], where: str = "."
) -> tuple[Outcome, str]:
    """Dry-run every object of ``documents`` (file shown, its documents) at ``versions``;
    the outcome and the status line for the report (``where``: the tree, as shown)."""
    started = time.perf_counter()
    pins = pinfile.load()
    objects = items(documents)
    minor = binary_minor(pins)
    ok, not_ok = emulable(minor, versions)
    pin = pins.tools[APISERVER].version
    findings: list[Finding] = []
    if not_ok:
        findings.append(
            Finding(where, "", "", "", f"kube-apiserver {pin} emulates 1.{minor - EMULATED_BACK} "
                    f"to 1.{minor}; not dry-run at {', '.join(not_ok)}", TOOL, severity=WARNING)
        )  # fmt: skip
    if ok and objects:
        with ControlPlane(ok) as plane:
            findings += judge(plane, objects, pins)
    status = f"{len(objects)} objects dry-run at {', '.join(ok) or 'no version'} ({pin})"
    return Outcome((), tuple(findings), time.perf_counter() - started), status


def stop() -> None:
    """End a dry-run in flight in another thread at once (``controlplane.stop_all``)."""
    stop_all()


def identity() -> str:
    """The API server check as part of a remembered report's key: which binaries judged."""
    return "apiserver " + " ".join(tools.identity(name) for name in (APISERVER, ETCD))


def gate_step(setup: Any, display: Callable[[str], str]) -> tuple[Outcome, str]:
    """The gate's API server step over ``setup.manifests`` (``compiler.gate._Setup``); the
    gate has made sure the binaries are there (asked for, a missing one is an error)."""
    documents = []
    for rel in setup.manifests:
        docs = setup.memo.parsed_documents(rel)
        if not isinstance(docs, str):  # unreadable: the other validators say so
            documents.append((display(rel), docs))
    return run(documents, setup.versions, setup.shown_root or ".")
