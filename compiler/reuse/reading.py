"""What one gate run reads: the tree's files (once each, or as the caller already holds
them) and the store's gate area (``compiler.reuse.store``), counting what it reuses."""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from compiler.gate.files import read_documents
from compiler.reuse import store


def documents(data: bytes) -> int:
    """How many resources kubeconform counts in a manifest (its non-empty documents)."""
    docs = re.split(r"^---[ \t]*$", data.decode("utf-8", "replace"), flags=re.MULTILINE)
    return sum(
        1
        for doc in docs
        if any(ln.strip() and not ln.lstrip().startswith("#") for ln in doc.splitlines())
    )


class Reading:
    """The files under ``root`` and the remembered passes, as one gate run reads them."""

    def __init__(
        self,
        root: Path,
        known: Mapping[str, str] | None = None,
        parsed: Mapping[str, Sequence[Any]] | None = None,
    ) -> None:
        self.store = store.Store("gate")
        self.root = root
        # Texts of files under root, exactly as on disk, and the documents some of them
        # read back as, from the caller.
        self.known = known or {}
        self.parsed = parsed or {}
        self._bytes: dict[str, bytes] = {}
        self._digests: dict[str, str] = {}
        self._documents: dict[str, int] = {}
        self._parsed_here: dict[str, list[Any] | str] = {}
        self.reused = 0

    # -- the tree --------------------------------------------------------------------------

    def read(self, rel: str) -> bytes:
        """The bytes of ``rel`` (under the root), read once per run."""
        if rel not in self._bytes:
            if (text := self.known.get(rel)) is not None:
                self._bytes[rel] = text.encode("utf-8")
                return self._bytes[rel]
            # Plain os calls, not pathlib: thousands of files per run.
            with open(os.path.join(self.root, rel), "rb") as fh:  # noqa: PTH118, PTH123
                self._bytes[rel] = fh.read()
        return self._bytes[rel]

    def digest(self, rel: str) -> str:
        """The SHA-256 of ``rel``'s bytes, once per run (every Kubernetes version asks)."""
        if rel not in self._digests:
            self._digests[rel] = hashlib.sha256(self.read(rel)).hexdigest()
        return self._digests[rel]

    def documents(self, rel: str) -> int:
        """``documents`` of ``rel``, counted once per run (every version asks)."""
        if rel not in self._documents:
            self._documents[rel] = documents(self.read(rel))
        return self._documents[rel]

    def documents_of(self, rel: str, parse: Callable[[bytes], list[Any] | str]) -> list[Any] | str:
        """The documents ``rel`` holds: as the caller gave them (it read them back from
        exactly these bytes), else ``parse`` of its bytes (once per run; a string: why
        they cannot be read)."""
        if (docs := self.parsed.get(rel)) is not None:
            return list(docs)
        if rel not in self._parsed_here:
            self._parsed_here[rel] = parse(self.read(rel))
        return self._parsed_here[rel]

    def parsed_documents(self, rel: str) -> list[Any] | str:
        """``documents_of`` with the gate's reader."""
        return self.documents_of(rel, read_documents)

    # -- the store ---------------------------------------------------------------------------

    def agreed(self, k: str) -> bool:
        """Whether ``k`` (a standbyc check of its own, not a validator's pass) was found
        to hold before."""
        return self.store.get(k) is not None

    def passed(self, k: str | None) -> bytes | None:
        """What was remembered with the pass (b"" for a bare pass); None: run it."""
        if k is None:
            return None
        found = self.store.get(k)
        if found is not None:
            self.reused += 1
        return found

    def remember(self, k: str | None, detail: bytes = b"") -> None:
        if k is not None:
            self.store.put(k, detail)
