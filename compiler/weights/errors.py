"""Errors of the weight delta library (all exit 2: the input is bad)."""

from __future__ import annotations

from compiler.errors import EXIT_BAD_INPUT, EXIT_FAILED, StandbycError


class WeightsError(StandbycError):
    """A checkpoint, manifest or delta is malformed or does not match."""

    exit_code = EXIT_BAD_INPUT


class SafetensorsError(WeightsError):
    """A safetensors file or index is malformed."""


class DeltaError(WeightsError):
    """A delta file is malformed, corrupted, or meant for another base."""


class NoSpace(DeltaError):
    """The filesystem cannot hold the target: refused before anything is written."""


class VerifyFailed(WeightsError):
    """A checkpoint does not match its manifest (``verify`` says no: exit 1)."""

    exit_code = EXIT_FAILED
