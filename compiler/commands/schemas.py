"""``standbyc schemas build``: (re)build the offline schema directory kubeconform reads."""

from __future__ import annotations

import argparse
from pathlib import Path

from compiler.errors import EXIT_OK, UsageError


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "schemas",
        help="manage the offline schema directory",
        description="Build JSON schemas for Kubernetes (from kubernetes-validate) and for the "
        "CRDs standbyc emits (from pinned Go modules) into a cache directory.",
    )
    parser.add_argument("action", choices=("build", "path"), help="build it, or print its path")
    parser.add_argument(
        "--kube-version",
        action="append",
        metavar="V",
        help="Kubernetes version to build (repeatable; default: the matrix)",
    )
    parser.add_argument("--schema-dir", type=Path, help="where to build (default: the cache)")
    parser.add_argument(
        "--offline",
        action="store_true",
        help="read the Go module cache only (GOPROXY=off)",
    )
    parser.add_argument(
        "--if-stale",
        action="store_true",
        help="do nothing when the directory already holds these versions from the current pins",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from compiler.gate import schemas

    root: Path = args.schema_dir or schemas.default_schema_dir()
    if args.action == "path":
        print(root)
        return EXIT_OK
    if args.action != "build":
        raise UsageError(f"unknown action {args.action}")
    root.mkdir(parents=True, exist_ok=True)
    versions = args.kube_version or list(schemas.default_kube_versions())
    if args.if_stale and schemas.is_fresh(root, versions):
        print(f"{root} is up to date")
        return EXIT_OK
    manifest = schemas.build(root, versions, allow_network=not args.offline)
    versions = ", ".join(manifest["kubernetes"])
    print(f"built {root}")
    print(f"  kubernetes {versions} (kubernetes-validate {manifest['kubernetes_validate']})")
    for name in manifest["crds"]:
        print(f"  crd {name}")
    return EXIT_OK
