from __future__ import annotations

import io
import os
import shutil
from collections.abc import Iterator
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings

from compiler.cli import main
from compiler.gate.controlplane import ControlPlane
from tests import cluster

# Property tests take their example counts from a profile: a small one for every run
# (`make test`), a large one for `make fuzz` (pytest --hypothesis-profile=fuzz).
settings.register_profile("default", max_examples=40)
settings.register_profile("fuzz", max_examples=2000)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))

# Every test runs the real tools, not passes remembered from an earlier run (the tests of
# the cache itself turn it on, in a directory of their own).
os.environ["STANDBYC_CACHE"] = "off"

REPO = Path(__file__).resolve().parent.parent
CASES = Path(__file__).resolve().parent / "cases"
OUT = REPO / "out"  # the committed output of specs/: the golden tree of the example specs


def golden_trees() -> list[tuple[Path, Path]]:
    """(spec, the tree it compiles to): each example spec with the committed out/, and each
    tests/cases/<scenario>/spec.yaml with its expected/. Each golden lives in one place."""
    pairs = [(spec, OUT) for spec in sorted((REPO / "specs").glob("*.yaml"))]
    pairs += [(case / "spec.yaml", case / "expected") for case in sorted(CASES.iterdir())]
    return pairs


def golden_versions(tree: Path) -> list[str] | None:
    """The Kubernetes versions the specs of a golden tree ask to be validated against, as
    compile gathers them (None: the default matrix)."""
    import yaml  # noqa: PLC0415

    asked = {
        str(v)
        for spec, root in golden_trees()
        if root == tree
        for v in (yaml.safe_load(spec.read_text()).get("spec") or {})
        .get("validation", {})
        .get("kubernetesVersions")
        or ()
    }
    return sorted(asked) or None


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-golden",
        action="store_true",
        help="rewrite tests/cases/*/expected from the current compiler output",
    )


@dataclass
class Run:
    code: int
    out: str
    err: str


def run_cli(*args: str) -> Run:
    """Run ``standbyc`` in-process and capture its exit code and output."""
    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(list(args))
    return Run(code, out.getvalue(), err.getvalue())


@pytest.fixture
def cli() -> type[Run]:
    return Run


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A scratch project: the example specs under specs/, cwd set to it."""
    shutil.copytree(REPO / "specs", tmp_path / "specs")
    monkeypatch.chdir(tmp_path)
    yield tmp_path


def tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def import_torch() -> Any:
    """torch, the optional extra. ``make test`` installs it and sets STANDBYC_REQUIRE_TORCH=1,
    so there a missing torch fails the tests; elsewhere they are skipped."""
    if os.environ.get("STANDBYC_REQUIRE_TORCH") == "1":
        import torch  # noqa: PLC0415 - optional dependency

        return torch
    return pytest.importorskip("torch")


def field_paths(node: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every path into nested dicts and lists (for mutation tests)."""
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += field_paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += field_paths(v, (*prefix, i))
    return out


@pytest.fixture(scope="session")
def control_plane() -> Iterator[ControlPlane]:
    """A real etcd and one kube-apiserver per matrix version, for the whole session (each
    pytest-xdist worker runs its own); missing binaries fail the test, never skip it."""
    yield from cluster.start()
