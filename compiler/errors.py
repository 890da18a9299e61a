"""The one error family of standbyc.

Every expected failure is a ``StandbycError``; ``cli.main`` is the only place
that turns one into an exit code. Anything else escaping a command is a bug
(exit 3).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

EXIT_OK = 0
EXIT_FAILED = 1  # a check or a validation said no
EXIT_BAD_INPUT = 2  # bad input or usage
EXIT_INTERNAL = 3  # a bug in standbyc
# 4 to 8 are the weights commands' own: compiler/commands/weights/exits.py.


@dataclass(frozen=True)
class Location:
    """Where a problem is: file, 1-based line and column, dotted field path."""

    file: str
    line: int | None = None
    column: int | None = None
    path: str = ""

    def __str__(self) -> str:
        out = self.file
        if self.line is not None:
            out += f":{self.line}"
            if self.column is not None:
                out += f":{self.column}"
        if self.path:
            out += f": {self.path}"
        return out


@dataclass(frozen=True)
class Diagnostic:
    location: Location
    message: str

    def __str__(self) -> str:
        return f"{self.location}: {self.message}"

    def to_json(self) -> dict[str, str | int | None]:
        loc = self.location
        return {
            "file": loc.file,
            "line": loc.line,
            "column": loc.column,
            "path": loc.path,
            "message": self.message,
        }


class StandbycError(Exception):
    """Base of every error standbyc expects; carries its own exit code."""

    exit_code = EXIT_BAD_INPUT

    def render(self) -> str:
        return str(self)


class UsageError(StandbycError):
    """The command line itself is wrong."""


class SpecError(StandbycError):
    """One or more located problems in a spec file."""

    def __init__(self, diagnostics: Sequence[Diagnostic]) -> None:
        self.diagnostics = tuple(diagnostics)
        super().__init__("\n".join(str(d) for d in self.diagnostics))

    @classmethod
    def at(cls, location: Location, message: str) -> SpecError:
        return cls([Diagnostic(location, message)])


class TemplateError(StandbycError):
    """A template failed to render or rendered the wrong shape (template:line)."""

    exit_code = EXIT_BAD_INPUT


class NoPermission(StandbycError):
    """A file or folder standbyc must read or write is closed to the user it runs as (a tree
    copied into an image as another user's, a volume owned by root): the machine's state,
    not a bug."""


class ValidationFailed(StandbycError):
    """kubeconform, promtool or pint rejected something standbyc emitted."""

    exit_code = EXIT_FAILED


class ToolMissing(StandbycError):
    """An external tool is not installed; the message names the install command."""

    exit_code = EXIT_BAD_INPUT


class ToolFailed(StandbycError):
    """An external tool exited in a way its wrapper did not expect."""

    exit_code = EXIT_FAILED
