"""Shared helpers for the validation-gate tests.

These tests run the real kubeconform, promtool and pint. A missing tool is a FAILED test
(never a skip): CI must install the tools with ``make tools``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from compiler import tools
from compiler.gate import DEFAULT_KUBE_VERSIONS, schemas

FIXTURES = Path(__file__).parent / "fixtures"


def need(*names: str) -> None:
    """Fail the calling test (not skip) when a tool is missing, naming ``make tools``."""
    missing = [n for n in names if tools.find(n) is None]
    if missing:
        pytest.fail(
            f"{', '.join(missing)} not installed: run `make tools` "
            f"(scripts/install-tools.sh), or set STANDBYC_TOOLS_DIR",
            pytrace=False,
        )


@pytest.fixture(scope="session")
def schema_dir() -> Path:
    """The offline schema directory for the default matrix, built offline if needed."""
    root = schemas.default_schema_dir()
    try:
        schemas.ensure(root, DEFAULT_KUBE_VERSIONS)
    except schemas.SchemasMissing as exc:
        pytest.fail(f"offline schemas unavailable: run `make tools`\n{exc}", pytrace=False)
    return root


@pytest.fixture(name="need")
def need_fixture() -> Callable[..., None]:
    return need


@pytest.fixture
def validators(schema_dir: Path) -> Path:
    need("kubeconform", "promtool")
    return schema_dir
