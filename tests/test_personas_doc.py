"""docs/personas.md names, for every step of the three newcomers, the test that repeats
it: each named test exists, so the page cannot point at a test that was renamed away."""

from __future__ import annotations

import ast
import re

from tests.conftest import REPO

DOC = (REPO / "docs" / "personas.md").read_text()
NAMED = sorted(set(re.findall(r"`(tests/[\w/]+\.py)::(test_\w+)`", DOC)))


def test_the_page_names_tests_for_all_three() -> None:
    assert len(NAMED) >= 20
    for heading in ("platform engineer", "Argo CD user", "ML engineer"):
        assert f"## An {heading}" in DOC or f"## A {heading}" in DOC


def test_every_test_it_names_exists() -> None:
    missing = []
    for path, name in NAMED:
        tree = ast.parse((REPO / path).read_text())
        if name not in {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}:
            missing.append(f"{path}::{name}")
    assert not missing
