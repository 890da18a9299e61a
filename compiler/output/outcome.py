"""What a command has to say (an ``Outcome``), which every writer prints in its format."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol


class Outcome(Protocol):
    """What a command has to say, in every format, and the exit code it implies."""

    @property
    def exit_code(self) -> int: ...

    def to_json(self) -> dict[str, Any]:
        """One JSON document, whatever the outcome."""
        ...

    def text(self) -> str:
        """For people, on stdout ('' for nothing)."""
        ...

    def problem(self) -> str:
        """What went wrong, for stderr ('' when nothing did)."""
        ...


@dataclass(frozen=True)
class Message:
    """The outcome of a command with one document and one line to say."""

    doc: dict[str, Any]
    line: str
    trouble: str = ""
    exit_code: int = 0

    def to_json(self) -> dict[str, Any]:
        return self.doc

    def text(self) -> str:
        return self.line

    def problem(self) -> str:
        return self.trouble
