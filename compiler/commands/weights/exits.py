"""What a weights error means to the caller of a ``standbyc weights`` command: its exit code.

The library raises its errors without exit codes (``compiler/weights/errors.py``,
``compiler/weights/sync/errors.py``); only here do they become exit codes. The weight-sync
Job's outcome and the WeightSyncFailed alert are read from these codes (README, exit codes).
Codes 0 to 3 are every command's (``compiler/errors.py``); 4 to 8 are the weights commands'
own.
"""

from __future__ import annotations

from compiler.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERNAL, EXIT_OK, StandbycError
from compiler.weights import errors as lib
from compiler.weights.sync import errors as sync

EXIT_UNREACHABLE = 4  # sync: the store did not answer after every retry (publish: the bucket)
EXIT_NOT_LOADED = 5  # sync: on disk, but some engine pods did not load it
EXIT_LOST_RACE = 6  # publish: another publisher wrote the store's index first
EXIT_BLOCKED = 7  # publish: a stopped publish's objects block the generation
EXIT_REFUSED = 8  # sync: the generation is not signed as the trust requires

# A row per family of errors, and one for a member only where its code differs from its
# family's; the most specific row wins.
EXIT_CODES: dict[type[lib.WeightsError], int] = {
    lib.WeightsError: EXIT_BAD_INPUT,  # bad input: a malformed file, a mismatch, a full disk
    lib.VerifyFailed: EXIT_FAILED,  # verify said no
    sync.OldWeightsKept: EXIT_FAILED,  # sync: a download or the rebuild did not verify
    sync.SignatureRefused: EXIT_REFUSED,  # kept too, but a rerun would refuse it again
    sync.StoreUnavailable: EXIT_UNREACHABLE,  # unreachable, out of time, or missing a file
    sync.PublishRaced: EXIT_LOST_RACE,  # publish: another publisher wrote the index first
    sync.PublishBlocked: EXIT_BLOCKED,  # publish: a rerun does not clear it, a person must
}


# What each code means to the caller of a command: one table, written into its --help.
SYNC_EXITS: dict[int, str] = {
    EXIT_OK: "updated or already current (and every engine asked loaded it)",
    EXIT_FAILED: "a download or the result did not verify (the old directory is kept)",
    EXIT_BAD_INPUT: "bad input (arguments, index, a generation not published, another sync "
    "of the target still running after --lock-wait, credentials an s3:// store refused)",
    EXIT_INTERNAL: "internal error",
    EXIT_UNREACHABLE: "the store did not answer after every retry",
    EXIT_NOT_LOADED: "the new generation is on disk, but some engine pods did not load it "
    "(named in the output; a rerun asks them again)",
    EXIT_REFUSED: "with --verify: the generation is not signed as required (refused: the old "
    "directory is kept, no engine is asked)",
}
PUBLISH_EXITS: dict[int, str] = {
    EXIT_OK: "published (or already)",
    EXIT_BAD_INPUT: "bad input, credentials the bucket refused, or a directory that changed "
    "while it was published",
    EXIT_INTERNAL: "internal error",
    EXIT_UNREACHABLE: "the bucket did not answer",
    EXIT_LOST_RACE: "another publisher wrote the index first (publish again: it starts from "
    "the new index)",
    EXIT_BLOCKED: "objects of this generation with other content, which the index does not "
    "name, are in the bucket, left by a publish that stopped (or one still running): "
    "publishing again does not clear them; publish the next generation number, or delete "
    "the objects the message names once no publish of this generation runs",
}


def described(table: dict[int, str]) -> str:
    """``Exit codes: 0 ...; 1 ...`` for a command's help."""
    return (
        "Exit codes: " + "; ".join(f"{code} {text}" for code, text in sorted(table.items())) + "."
    )


def exit_code(exc: lib.WeightsError) -> int:
    """The exit code of a weights error: its own class's row, else its nearest parent's."""
    return next(EXIT_CODES[c] for c in type(exc).__mro__ if c in EXIT_CODES)


class WeightsFailed(StandbycError):
    """A weights command failed: the library's error, with the exit code it means."""

    def __init__(self, error: lib.WeightsError) -> None:
        super().__init__(str(error))
        self.exit_code = exit_code(error)
