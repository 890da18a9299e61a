"""What a weights error means to the caller of a ``standbyc weights`` command: its exit code.

The library raises its errors without exit codes (``compiler/weights/errors.py``,
``compiler/weights/sync/errors.py``); only here do they become exit codes. The weight-sync
Job's outcome and the WeightSyncFailed alert are read from these codes (README, exit codes).
Codes 0 to 3 are every command's (``compiler/errors.py``); 4 to 8 are the weights commands'
own.
"""

from __future__ import annotations

from compiler.errors import EXIT_BAD_INPUT, EXIT_FAILED, StandbycError
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


def exit_code(exc: lib.WeightsError) -> int:
    """The exit code of a weights error: its own class's row, else its nearest parent's."""
    return next(EXIT_CODES[c] for c in type(exc).__mro__ if c in EXIT_CODES)


class WeightsFailed(StandbycError):
    """A weights command failed: the library's error, with the exit code it means."""

    def __init__(self, error: lib.WeightsError) -> None:
        super().__init__(str(error))
        self.exit_code = exit_code(error)
