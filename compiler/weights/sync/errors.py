"""Errors of weight sync and publish (their exit codes: the exit table of the
``standbyc weights`` commands).

Two families let a caller name one base for what it handles alike: ``StoreUnavailable``
(the store did not give what was asked, in time) and ``OldWeightsKept`` (a sync stopped
before its swap: the standby still holds, and serves, its old weights).
"""

from __future__ import annotations

from compiler.weights.errors import WeightsError


class StoreError(WeightsError):
    """The store or its index is malformed, or lacks what was asked for."""


class StoreUnavailable(WeightsError):
    """The store did not give what was asked of it: it did not answer, the sync's budget
    ran out, or a file its index lists stayed missing. A rerun may succeed."""


class OldWeightsKept(WeightsError):
    """A sync stopped before its swap, because what it fetched or staged may not be served:
    the old weights are kept, and no engine is asked to load anything."""


class SourceUnreachable(StoreUnavailable):
    """The store did not answer, or kept failing, after every retry."""


class DownloadCorrupt(OldWeightsKept):
    """A downloaded file does not match the index: the old weights are kept."""


class SyncBusy(WeightsError):
    """Another sync holds the target's lock."""


class ApplyFailed(OldWeightsKept):
    """The downloaded files did not rebuild the target: the old weights are kept."""


class SyncTimeout(StoreUnavailable):
    """The sync's budget (--deadline) ran out before the store gave what it needs."""


class StoreIncomplete(StoreUnavailable):
    """The store lacks a file its index lists, after the index was read again."""


class NoPermission(WeightsError):
    """The Job cannot write where it keeps the weights: who must own what."""


class StoreDenied(WeightsError):
    """The object store refused the credentials, or none could be had: which credentials
    were used, and what the store answered."""


class PublishRaced(WeightsError):
    """Another publisher wrote the store's index, or the same generation's files, first:
    nothing of this run is named by the index; publish again on top of it."""


class PublishBlocked(WeightsError):
    """Objects of the generation being published are in the store with other content, and
    the index does not name them: a publish that stopped left them (or one still runs).
    Publishing again does not clear them."""


class SourceChanged(WeightsError):
    """The model directory changed, or lost a file, while it was published: nothing of it
    was published."""


class StateDamaged(WeightsError):
    """An entry of a tier's state directory is not what a sync made (a link, a FIFO, a
    directory where a file goes): the sync refuses to write through it."""


class SignatureRefused(OldWeightsKept):
    """The generation is not signed as the spec's trust requires (no signature, another
    key or identity, a file changed, added or removed after signing, or a signature of
    another generation): the old directory is kept and no engine is asked to load it."""
