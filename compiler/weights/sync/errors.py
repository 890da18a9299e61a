"""Errors of weight sync, and the exit codes the Job's outcome is read from."""

from __future__ import annotations

from compiler.errors import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_UNREACHABLE
from compiler.weights.errors import WeightsError


class StoreError(WeightsError):
    """The store or its index is malformed, or lacks what was asked for (exit 2)."""

    exit_code = EXIT_BAD_INPUT


class SourceUnreachable(WeightsError):
    """The store did not answer, or kept failing, after every retry (exit 4)."""

    exit_code = EXIT_UNREACHABLE


class DownloadCorrupt(WeightsError):
    """A downloaded file does not match the index (exit 1: the old weights are kept)."""

    exit_code = EXIT_FAILED


class SyncBusy(WeightsError):
    """Another sync holds the target's lock (exit 2)."""

    exit_code = EXIT_BAD_INPUT


class ApplyFailed(WeightsError):
    """The downloaded files did not rebuild the target (exit 1: the old weights are kept)."""

    exit_code = EXIT_FAILED


class SyncTimeout(WeightsError):
    """The sync's budget (--deadline) ran out before the store gave what it needs (exit 4)."""

    exit_code = EXIT_UNREACHABLE


class StoreIncomplete(WeightsError):
    """The store lacks a file its index lists, after the index was read again (exit 4)."""

    exit_code = EXIT_UNREACHABLE


class DiskFull(WeightsError):
    """No space left where standbyc writes; its temporary files are removed (exit 2)."""

    exit_code = EXIT_BAD_INPUT


class NoPermission(WeightsError):
    """The Job cannot write where it keeps the weights (exit 2): who must own what."""

    exit_code = EXIT_BAD_INPUT


class StoreDenied(WeightsError):
    """The object store refused the credentials, or none could be had (exit 2): which
    credentials were used, and what the store answered."""

    exit_code = EXIT_BAD_INPUT


EXIT_LOST_RACE = 6  # publish: another publisher replaced the index first


class PublishRaced(WeightsError):
    """Another publisher wrote the store's index, or the same generation's files, first
    (exit 6): nothing of this run is named by the index; publish again on top of it."""

    exit_code = EXIT_LOST_RACE
