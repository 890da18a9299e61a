"""The Grafana dashboard of a spec: what an on-call engineer opens when a failover pages.

Built with the Grafana Foundation SDK (``compiler.render.grafana``: the typed builders
Grafana maintains, pinned to the Grafana 11.6 schema) from the panels
``compiler.render.panels`` lays out, written as sorted JSON into a ConfigMap that
kube-prometheus-stack's Grafana sidecar loads (``dashboard.sidecarLabels``, the folder in
``dashboard.folderAnnotation``), and, with ``dashboard.grafanaOperator``, a
grafana-operator ``GrafanaDashboard`` that loads the same ConfigMap.
"""

from __future__ import annotations

from compiler.emitted import Emitted
from compiler.plan import Plan
from compiler.render.base import Renderer, filename

KIND = "ConfigMap"
OPERATOR_KIND = "GrafanaDashboard"


def data_key(plan: Plan) -> str:
    """The ConfigMap key: the file name the sidecar writes, one per namespace and spec. The
    two are joined with "_", which neither may hold: team-a/llm and team/a-llm differ."""
    return f"standbyc-{plan.namespace}_{plan.name}.json"


def render(plan: Plan, r: Renderer) -> list[Emitted]:
    settings = plan.dashboard
    if not settings.enabled:
        return []
    name = plan.names.dashboard
    # The SDK is imported only when a dashboard is rendered (not for a spec whose rendering
    # is reused, nor one without a dashboard).
    from compiler.render import grafana  # noqa: PLC0415

    obj = r.render("configmap-dashboard.yaml.j2", {"name": name, "key": data_key(plan)}, KIND)
    # The JSON goes in as data after the shape check: through the template's quoting, 40 KB
    # cost more than building the dashboard (the written file is read back all the same).
    obj["data"][data_key(plan)] = grafana.dashboard_json(plan)
    folder = {settings.folder_annotation: settings.folder}
    off = "dashboard.enabled: false, for no dashboard"
    labels = dict(settings.sidecar_labels)
    out = [Emitted(filename(KIND, name), obj, labels=labels, annotations=folder, without=off)]
    operator = settings.grafana_operator
    if operator is not None:
        cr = r.render(
            "grafanadashboard.yaml.j2",
            {
                "name": name,
                "selector": dict(operator.instance_selector),
                "cross_namespace": operator.allow_cross_namespace_import,
                "folder": settings.folder,
                "config_map": name,
                "key": data_key(plan),
            },
            OPERATOR_KIND,
        )
        out.append(Emitted(filename(OPERATOR_KIND, name), cr, without=off))
    return out
