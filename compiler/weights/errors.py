"""The weight library's errors. They say what went wrong; what exit code each kind means
is for the command line to say (the exit table of the ``standbyc weights`` commands): the
library is also called from Python, where an exit code means nothing."""

from __future__ import annotations


class WeightsError(Exception):
    """The root: a checkpoint, manifest, delta or store is malformed or does not match."""


class SafetensorsError(WeightsError):
    """A safetensors file or index is malformed."""


class DeltaError(WeightsError):
    """A delta file is malformed, corrupted, or meant for another base."""


class DiskFull(WeightsError):
    """No space left where standbyc writes (or plainly not enough for what it would write,
    refused before writing): what was there is unchanged, its temporary files removed.
    The one error of a full disk, wherever standbyc writes."""


class VerifyFailed(WeightsError):
    """A checkpoint does not match its manifest."""
