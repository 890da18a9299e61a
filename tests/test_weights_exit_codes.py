"""The weight library raises errors without exit codes; the CLI's table maps every one."""

from __future__ import annotations

import importlib
import importlib.util
import pkgutil

import compiler.weights
from compiler.commands.weights.exits import (
    EXIT_BLOCKED,
    EXIT_CODES,
    EXIT_LOST_RACE,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    exit_code,
)
from compiler.errors import EXIT_BAD_INPUT, EXIT_FAILED, StandbycError
from compiler.plan.model import REFUSED_EXIT
from compiler.weights.errors import DeltaError, VerifyFailed, WeightsError
from compiler.weights.sync.errors import (
    ApplyFailed,
    DownloadCorrupt,
    OldWeightsKept,
    PublishBlocked,
    PublishRaced,
    SignatureRefused,
    SourceChanged,
    SourceUnreachable,
    StateDamaged,
    StoreError,
    StoreIncomplete,
    StoreUnavailable,
    SyncTimeout,
)

CODES = {EXIT_BAD_INPUT, EXIT_FAILED, EXIT_UNREACHABLE, EXIT_LOST_RACE, EXIT_BLOCKED, EXIT_REFUSED}


def _subclasses(cls: type) -> set[type]:
    out = set(cls.__subclasses__())
    for sub in list(out):
        out |= _subclasses(sub)
    return out


def test_the_library_carries_no_exit_codes() -> None:
    for info in pkgutil.walk_packages(compiler.weights.__path__, "compiler.weights."):
        if info.name != "compiler.weights.testing":
            importlib.import_module(info.name)
    errors = _subclasses(WeightsError) | {WeightsError}
    assert len(errors) >= 10
    for cls in errors:
        assert not issubclass(cls, StandbycError), cls
        assert "exit_code" not in vars(cls), cls
        assert exit_code(cls("x")) in CODES, cls


def test_the_nearest_row_wins() -> None:
    assert exit_code(StoreError("x")) == EXIT_BAD_INPUT
    assert exit_code(DeltaError("x")) == EXIT_BAD_INPUT
    assert exit_code(VerifyFailed("x")) == EXIT_FAILED
    assert exit_code(ApplyFailed("x")) == EXIT_FAILED
    assert exit_code(SourceUnreachable("x")) == EXIT_UNREACHABLE
    assert exit_code(PublishRaced("x")) == EXIT_LOST_RACE
    assert exit_code(PublishBlocked("x")) == EXIT_BLOCKED  # not 6: a rerun would not clear it
    assert exit_code(SourceChanged("x")) == EXIT_BAD_INPUT
    assert exit_code(StateDamaged("x")) == EXIT_BAD_INPUT
    assert exit_code(SignatureRefused("x")) == EXIT_REFUSED

    class Later(SourceUnreachable):
        pass

    assert exit_code(Later("x")) == EXIT_UNREACHABLE
    assert set(EXIT_CODES.values()) == CODES


def test_the_compiled_job_fails_at_once_on_the_refused_exit_code() -> None:
    """The weight-sync Job's podFailurePolicy names the code sync exits with on a refusal."""
    assert REFUSED_EXIT == EXIT_REFUSED


# Every error of the library, by class name, and the exit code it had before the errors were
# given families (the families' own rows: what their members had). A class added, renamed or
# moved to another code fails here until this table says so on purpose.
TODAY = {
    "WeightsError": 2,
    "SafetensorsError": 2,
    "DeltaError": 2,
    "MergeImpossible": 2,
    "VerifyFailed": 1,
    "ModelDirError": 2,
    "StoreError": 2,
    "StoreUnavailable": 4,
    "SourceUnreachable": 4,
    "SyncTimeout": 4,
    "StoreIncomplete": 4,
    "OldWeightsKept": 1,
    "DownloadCorrupt": 1,
    "ApplyFailed": 1,
    "SignatureRefused": 8,
    "SyncBusy": 2,
    "DiskFull": 2,
    "NoPermission": 2,
    "StoreDenied": 2,
    "PublishRaced": 6,
    "PublishBlocked": 7,
    "SourceChanged": 2,
    "StateDamaged": 2,
}


def _every_error() -> set[type]:
    """WeightsError and every subclass the library defines (the torch adapter's module is
    read only where torch is installed; it defines no error)."""
    for info in pkgutil.walk_packages(compiler.weights.__path__, "compiler.weights."):
        if info.name == "compiler.weights.testing":
            continue
        if info.name.endswith(".torch_adapter") and importlib.util.find_spec("torch") is None:
            continue
        importlib.import_module(info.name)
    every = _subclasses(WeightsError) | {WeightsError}
    return {c for c in every if c.__module__.startswith("compiler.")}  # not a test's own


def test_every_error_keeps_its_exit_code() -> None:
    errors = _every_error()
    assert sorted(c.__name__ for c in errors) == sorted(TODAY)
    for cls in errors:
        assert exit_code(cls("x")) == TODAY[cls.__name__], cls


def test_a_family_is_one_base_and_one_row() -> None:
    for member in (SourceUnreachable, SyncTimeout, StoreIncomplete):
        assert issubclass(member, StoreUnavailable), member
        assert member not in EXIT_CODES, member
    for member in (DownloadCorrupt, ApplyFailed, SignatureRefused):
        assert issubclass(member, OldWeightsKept), member
    assert DownloadCorrupt not in EXIT_CODES
    assert ApplyFailed not in EXIT_CODES
    assert EXIT_CODES[OldWeightsKept] == EXIT_FAILED
    assert EXIT_CODES[SignatureRefused] == EXIT_REFUSED  # refused, not failed: kept apart
    assert EXIT_CODES[StoreUnavailable] == EXIT_UNREACHABLE


def test_the_help_says_the_codes_the_commands_exit_with() -> None:
    """One table, written into each command's --help: a refused signature is 8 there as in
    the code, the README and the compiled podFailurePolicy."""
    from compiler.commands.weights.exits import PUBLISH_EXITS, SYNC_EXITS  # noqa: PLC0415
    from tests.conftest import run_cli  # noqa: PLC0415

    sync_help = " ".join(run_cli("weights", "sync", "--help").out.split())
    publish_help = " ".join(run_cli("weights", "publish", "--help").out.split())
    assert f"{EXIT_REFUSED} with --verify: the generation is not signed as required" in sync_help
    assert EXIT_REFUSED == REFUSED_EXIT == 8
    for table, text in ((SYNC_EXITS, sync_help), (PUBLISH_EXITS, publish_help)):
        for code, meaning in table.items():
            assert f"{code} {' '.join(meaning.split())}" in text
    # Every code a sync's errors map to has its line.
    assert {EXIT_FAILED, EXIT_BAD_INPUT, EXIT_UNREACHABLE, EXIT_REFUSED} <= set(SYNC_EXITS)
    assert {EXIT_LOST_RACE, EXIT_BLOCKED, EXIT_UNREACHABLE} <= set(PUBLISH_EXITS)
