"""``standbyc argocd discover|generate``: the two commands of standbyc's Argo CD config
management plugin (deploy/argocd/plugin.yaml).

generate reads what Argo CD sets in its environment (``ENVIRONMENT`` below), and prints
only the objects, as one YAML stream in apply order, on stdout. Argo CD hands a plugin's
parameters (plugin.yaml ``parameters``, set in the UI or in ``source.plugin.parameters``)
as ``PARAM_<NAME>`` (upper case, other characters as ``_``; an array as ``PARAM_<NAME>_<i>``)
and ``source.plugin.env`` entries as ``ARGOCD_ENV_<NAME>``
(argoproj/argo-cd pkg/apis/application/v1alpha1/types.go,
``ApplicationSourcePluginParameters.Environ``); a parameter wins over an env entry.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from compiler.commands._common import Rerun

SKIP_DIRS = {".git", "out", "node_modules", ".venv"}


# (name, what it does): each read as PARAM_<name>, else ARGOCD_ENV_<name>.
SETTINGS: tuple[tuple[str, str], ...] = (
    ("SPECS", "spec files or directories, comma-separated (default: specs)"),
    ("KUBE_VERSIONS", "Kubernetes versions to validate against, comma-separated (default: "
     "KUBE_VERSION, the destination cluster's, which Argo CD sets)"),
    ("VALIDATE", "false: compile without validating (no kubeconform, promtool, pint or "
     "Kyverno)"),
    ("STRICT", "true: a missed failover objective fails the sync"),
    ("PART", "all (default): every object; spec: without the cluster-wide ones all specs "
     "share (the CRDs), for one Application per spec; cluster: only those, for the one "
     "Application per cluster that owns them"),
)  # fmt: skip
ENVIRONMENT = "\n".join(
    [f"  PARAM_{name} or ARGOCD_ENV_{name}: {what}" for name, what in SETTINGS]
    + ["  ARGOCD_APP_NAME, ARGOCD_APP_NAMESPACE: named in the log (stderr)"]
)


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("argocd", help="Argo CD config management plugin commands")
    actions = parser.add_subparsers(
        dest="argocd_command", metavar="ACTION", parser_class=type(parser)
    )
    actions.required = True
    discover = actions.add_parser("discover", help="print the standby specs in this directory")
    discover.set_defaults(func=run_discover)
    generate = actions.add_parser(
        "generate",
        help="compile the specs Argo CD names and print the objects on stdout",
        description="Compile the specs Argo CD names and print their objects on stdout, as "
        "one YAML stream in apply order (standbyc compile --stdout).",
        epilog="environment (Argo CD sets it):\n" + ENVIRONMENT,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    generate.set_defaults(func=run_generate)


def find_specs(root: Path) -> list[Path]:
    from compiler.pipeline import SPEC_KIND, declared_kind

    found: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in SKIP_DIRS and not d.startswith("."))
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if name.endswith((".yaml", ".yml")) and declared_kind(path) == SPEC_KIND:
                found.append(path.relative_to(root))
    return found


def run_discover(args: argparse.Namespace) -> int:
    """Argo CD treats any output as "this plugin applies"."""
    for path in find_specs(Path.cwd()):
        print(path.as_posix())
    return 0


def _kube_version(raw: str) -> str:
    """``v1.31.2``, ``1.31`` or ``1.31+`` (as clusters report it) -> ``1.31``."""
    match = re.match(r"^v?(\d+)\.(\d+)", raw.strip())
    if match is None:
        raise ValueError(raw)
    return f"{match.group(1)}.{match.group(2)}"


def setting(env: dict[str, str], name: str) -> str | None:
    """``name`` as a plugin parameter (a string, or an array joined by commas), else as a
    ``source.plugin.env`` entry; None when neither is set."""
    if (value := env.get(f"PARAM_{name}")) is not None:
        return value
    items = sorted(
        (int(key.rsplit("_", 1)[1]), value)
        for key, value in env.items()
        if re.fullmatch(rf"PARAM_{name}_\d+", key)
    )
    if items:
        return ",".join(value for _, value in items)
    return env.get(f"ARGOCD_ENV_{name}")


def generate_argv(env: dict[str, str]) -> list[str]:
    """The ``standbyc compile --stdout`` command line that Argo CD's environment asks for."""
    from compiler.errors import UsageError

    raw_specs = setting(env, "SPECS") or "specs"
    specs = [s.strip() for s in raw_specs.split(",") if s.strip()]
    argv = ["compile", *specs, "--stdout"]
    versions = setting(env, "KUBE_VERSIONS") or env.get("KUBE_VERSION", "")
    try:
        for version in (v for v in versions.split(",") if v.strip()):
            argv += ["--kube-version", _kube_version(version)]
    except ValueError as exc:
        raise UsageError(f"cannot read a Kubernetes version from {exc.args[0]!r}") from None
    if (setting(env, "VALIDATE") or "true").lower() in ("false", "0", "no"):
        argv.append("--no-validate")
    if (setting(env, "STRICT") or "false").lower() in ("true", "1", "yes"):
        argv.append("--strict")
    part = (setting(env, "PART") or "all").strip().lower()
    if part not in ("spec", "cluster", "all"):
        raise UsageError(f"PART {part!r}: spec, cluster or all")
    return [*argv, "--part", part]


def run_generate(args: argparse.Namespace) -> Rerun:
    env = dict(os.environ)
    argv = generate_argv(env)
    app = env.get("ARGOCD_APP_NAME") or "(unnamed)"
    namespace = env.get("ARGOCD_APP_NAMESPACE")
    where = f" (namespace {namespace})" if namespace else ""
    print(f"standbyc: Argo CD app {app}{where}: standbyc {' '.join(argv)}", file=sys.stderr)
    return Rerun(argv)
