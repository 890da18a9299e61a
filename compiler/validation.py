"""The validation gate with every reuse plugged in: what ``standbyc validate``, ``standbyc
compile`` and the tests run.

The gate (``compiler.gate``) is a plain validator that asks a ``Reuse`` what need not run;
``compiler.reuse.verdicts.GateMemo`` is the one that answers from earlier work. Here, and
only here, ``STANDBYC_REUSE=off`` (``compiler.reuse.switch``) picks the plain one instead,
``compiler.gate.reuse.Recompute``: every validator on every input, every file read from
disk, nothing remembered.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from compiler import gate
from compiler.gate.report import Report
from compiler.gate.reuse import Opener, Recompute, Reuse
from compiler.gate.schemas import SchemaDir
from compiler.reuse import switch
from compiler.reuse.verdicts import GateMemo


def gate_reuse(
    known: Mapping[str, str] | None = None, parsed: Mapping[str, Sequence[Any]] | None = None
) -> Opener:
    """The reuse a gate run gets: ``GateMemo``, told the texts the caller holds (``known``)
    and the documents they read back as (``parsed``); with ``STANDBYC_REUSE=off``,
    ``Recompute``."""
    if not switch.enabled():
        return Recompute

    def memo(root: Path, sd: SchemaDir, versions: Sequence[str]) -> Reuse:
        return GateMemo(root, sd, versions, known, parsed)

    return memo


def run_gate(
    root: Path,
    *,
    kube_versions: Sequence[str] | None = None,
    schema_dir: Path | None = None,
    display_root: str | None = None,
    only: Sequence[str] | None = None,
    known: Mapping[str, str] | None = None,
    parsed: Mapping[str, Sequence[Any]] | None = None,
    apiserver: bool | None = None,
) -> Report:
    """``compiler.gate.run_gate`` over ``root`` with ``gate_reuse``. ``known``: texts of
    files under ``root`` the caller has just written or read, exactly as they are on
    disk; they are not read again. ``parsed``: the documents some of those texts read back
    as (``yamlio.read_back``); they are not parsed again."""
    return gate.run_gate(
        root,
        reuse=gate_reuse(known, parsed),
        kube_versions=kube_versions,
        schema_dir=schema_dir,
        display_root=display_root,
        only=only,
        apiserver=apiserver,
    )
