"""Golden trees: each tests/cases/<scenario>/spec.yaml compiles to expected/."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest

from tests.conftest import CASES, run_cli, tree

SCENARIOS = sorted(p.name for p in CASES.iterdir() if (p / "spec.yaml").is_file())


def _compile(case: Path, out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Compile from inside the case so headers name "spec.yaml", wherever the repo is.
    monkeypatch.chdir(case)
    result = run_cli("compile", "spec.yaml", "--out", str(out), "--no-validate")
    assert result.code == 0, result.err


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_golden(
    scenario: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    case = CASES / scenario
    out = tmp_path / "out"
    _compile(case, out, monkeypatch)
    expected_dir = case / "expected"
    if request.config.getoption("--update-golden"):
        shutil.rmtree(expected_dir, ignore_errors=True)
        shutil.copytree(out, expected_dir)
        return
    got, want = tree(out), tree(expected_dir)
    diffs: list[str] = []
    for rel in sorted(set(got) | set(want)):
        if got.get(rel) != want.get(rel):
            diffs.extend(
                difflib.unified_diff(
                    want.get(rel, b"").decode().splitlines(keepends=True),
                    got.get(rel, b"").decode().splitlines(keepends=True),
                    fromfile=f"expected/{rel}",
                    tofile=f"got/{rel}",
                )
            )
    assert not diffs, "output differs from golden files (pytest --update-golden):\n" + "".join(
        diffs
    )


def test_compile_is_deterministic(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    case = CASES / "seed"
    _compile(case, tmp_path / "a", monkeypatch)
    _compile(case, tmp_path / "b", monkeypatch)
    assert tree(tmp_path / "a") == tree(tmp_path / "b")
