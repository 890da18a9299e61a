"""``standbyc tools install``: build the pinned validators, so a wheel works without a clone."""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
from pathlib import Path

from compiler.errors import EXIT_OK, ToolFailed


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = sub.add_parser(
        "tools",
        help="install the validators standbyc runs (kubeconform, promtool, pint)",
        description="Build the pinned validators with Go (versions and sums from "
        "compiler/data/pins.json), fetch the CRD sources and build the offline schemas. "
        "Needs Go >= 1.24 and network access to the Go module proxy; afterwards "
        "everything runs offline.",
    )
    parser.add_argument("action", choices=("install",), help="what to do")
    parser.add_argument(
        "--dir", type=Path, default=None, help="where the binaries go (default: the user cache)"
    )
    parser.add_argument(
        "--test-servers",
        action="store_true",
        help="also the servers and tools standbyc's own tests run (the Pushgateway, "
        "versitygw, cyclonus)",
    )
    parser.add_argument(
        "--optional",
        action="store_true",
        help="also the optional validators: the Kyverno CLI, which runs each ClusterPolicy's "
        "generated `kyverno test` (a build of several minutes), and kube-apiserver and etcd, "
        "which `validate --apiserver` runs (a build of about 17 minutes)",
    )
    parser.add_argument(
        "--no-schemas", action="store_true", help="do not build the offline schema directory"
    )
    parser.set_defaults(func=run)


def _log(message: str) -> None:
    print(f"==> {message}", file=sys.stderr)


def _apt_fallback(apt: str, dest: Path) -> bool:
    """promtool from Debian when it cannot be built (as root, with apt-get)."""
    if shutil.which("apt-get") is None or os.geteuid() != 0:
        return False
    _log(f"apt-get install {apt}")
    name = apt.split("=", 1)[0]
    for argv in (["apt-get", "install", "-y", "--no-install-recommends", apt],
                 ["apt-get", "install", "-y", "--no-install-recommends", name]):  # fmt: skip
        if subprocess.run(argv, capture_output=True, check=False).returncode == 0:
            found = shutil.which("promtool")
            if found:
                (dest / "promtool").unlink(missing_ok=True)
                (dest / "promtool").symlink_to(found)
                (dest / ".promtool.pin").write_text(f"debian:{apt}\n")
                return True
    return False


def run(args: argparse.Namespace) -> int:
    from compiler import tools
    from compiler.gate import install, schemas
    from compiler.gate import pins as pinfile

    pins = pinfile.load()
    dest: Path = args.dir or tools.user_bin_dir()
    names = [n for n, pin in pins.tools.items() if args.optional or not pin.optional]
    names += list(pins.test_tools) if args.test_servers else []
    every = {**pins.tools, **pins.test_tools}
    for name in names:
        pin = every[name]
        try:
            install.install(pins, [name], dest, _log)
        except ToolFailed:
            if name == "pint":
                _log("pint could not be built; validation runs without its lint")
                continue
            if not (pin.fallback_apt and _apt_fallback(pin.fallback_apt, dest)):
                raise
    if not args.no_schemas:
        install.download_crd_modules(pins, _log, tests=args.test_servers)
        root, versions = schemas.default_schema_dir(), list(pins.kube_prebuilt)
        if not schemas.is_fresh(root, versions):
            _log(f"building the offline schemas in {root}")
            schemas.build(root, versions)
    print(f"tools in {dest}")
    return EXIT_OK
