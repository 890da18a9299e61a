"""The weight library raises errors without exit codes; the CLI's table maps every one."""

from __future__ import annotations

import importlib
import pkgutil

import compiler.weights
from compiler import trust
from compiler.commands.weights.exits import (
    EXIT_BLOCKED,
    EXIT_CODES,
    EXIT_LOST_RACE,
    EXIT_REFUSED,
    EXIT_UNREACHABLE,
    exit_code,
)
from compiler.errors import EXIT_BAD_INPUT, EXIT_FAILED, StandbycError
from compiler.weights.errors import DeltaError, VerifyFailed, WeightsError
from compiler.weights.sync.errors import (
    ApplyFailed,
    PublishBlocked,
    PublishRaced,
    SignatureRefused,
    SourceChanged,
    SourceUnreachable,
    StateDamaged,
    StoreError,
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
    assert trust.REFUSED_EXIT == EXIT_REFUSED
