"""``standbyc argocd discover|generate``: the two commands of standbyc's Argo CD config
management plugin (deploy/argocd/plugin.yaml).

generate reads what Argo CD sets in its environment:

- ``ARGOCD_ENV_SPECS``: spec files or directories, separated by commas (default: specs)
- ``ARGOCD_ENV_KUBE_VERSIONS``: Kubernetes versions to validate against, separated by
  commas; else ``KUBE_VERSION``, the version of the destination cluster
- ``ARGOCD_ENV_VALIDATE=false``: skip kubeconform and promtool
- ``ARGOCD_ENV_STRICT=true``: a missed failover objective fails the sync
- ``ARGOCD_APP_NAME``, ``ARGOCD_APP_NAMESPACE``: named in the log (stderr)

and prints only the objects, as one YAML stream in apply order, on stdout.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from pathlib import Path

from compiler.commands._common import Rerun

SKIP_DIRS = {".git", "out", "node_modules", ".venv"}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser("argocd", help="Argo CD config management plugin commands")
    actions = parser.add_subparsers(
        dest="argocd_command", metavar="ACTION", parser_class=type(parser)
    )
    actions.required = True
    discover = actions.add_parser("discover", help="print the standby specs in this directory")
    discover.set_defaults(func=run_discover)
    generate = actions.add_parser(
        "generate", help="compile the specs Argo CD names and print the objects on stdout"
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


def generate_argv(env: dict[str, str]) -> list[str]:
    """The ``standbyc compile --stdout`` command line that Argo CD's environment asks for."""
    from compiler.errors import UsageError

    specs = [s.strip() for s in env.get("ARGOCD_ENV_SPECS", "specs").split(",") if s.strip()]
    argv = ["compile", *specs, "--stdout"]
    versions = env.get("ARGOCD_ENV_KUBE_VERSIONS") or env.get("KUBE_VERSION", "")
    try:
        for version in (v for v in versions.split(",") if v.strip()):
            argv += ["--kube-version", _kube_version(version)]
    except ValueError as exc:
        raise UsageError(f"cannot read a Kubernetes version from {exc.args[0]!r}") from None
    if env.get("ARGOCD_ENV_VALIDATE", "true").lower() in ("false", "0", "no"):
        argv.append("--no-validate")
    if env.get("ARGOCD_ENV_STRICT", "false").lower() in ("true", "1", "yes"):
        argv.append("--strict")
    return argv


def run_generate(args: argparse.Namespace) -> Rerun:
    env = dict(os.environ)
    argv = generate_argv(env)
    app = env.get("ARGOCD_APP_NAME", "?")
    print(
        f"standbyc: Argo CD app {app} (namespace {env.get('ARGOCD_APP_NAMESPACE', '?')}): "
        f"standbyc {' '.join(argv)}",
        file=sys.stderr,
    )
    return Rerun(argv)
