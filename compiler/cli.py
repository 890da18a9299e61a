"""Command line entry point: parse, dispatch, map outcomes to exit codes."""

from __future__ import annotations

import argparse
import contextlib
import errno
import os
import signal
import sys
import traceback
from collections.abc import Sequence

from compiler import __version__, output
from compiler.commands import COMMANDS
from compiler.commands._common import Rerun
from compiler.commands.weights.exits import WeightsFailed
from compiler.errors import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_INTERNAL,
    NoPermission,
    StandbycError,
)
from compiler.weights.errors import DiskFull


class _Parser(argparse.ArgumentParser):
    """argparse that reports usage errors as exit 2 without calling sys.exit itself."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise _UsageExit(f"{self.prog}: error: {message}\n{self.format_usage().rstrip()}")


class _UsageExit(Exception):
    pass


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="standbyc",
        description="Compile standby specs (a model served by hot, warm and cold standby "
        "tiers, and the network they share) into validated Kubernetes objects in out/, and "
        "move model weights to the standbys by sending only what changed.",
        epilog="Exit codes: 0 ok; 1 out/ is stale (check), validation failed, or a failover "
        "objective was missed with --strict or failover.strict; 2 bad input or usage (a "
        "full disk and a permission denied included); 3 a bug in standbyc; 4 (weights sync) "
        "the store did not answer; "
        "5 (weights sync) on disk, but not every engine loaded it; 6 (weights publish) another "
        "publisher wrote the store's index first.",
    )
    parser.add_argument("--version", action="version", version=f"standbyc {__version__}")
    parser.add_argument("--debug", action="store_true", help="show tracebacks for every error")
    sub: argparse._SubParsersAction[argparse.ArgumentParser] = parser.add_subparsers(
        dest="command", metavar="COMMAND", parser_class=_Parser
    )
    sub.required = True
    for register in COMMANDS.values():
        register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    # A file name that is not UTF-8 must not turn into an encoding error on the way out.
    for stream in (sys.stdout, sys.stderr):
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            with contextlib.suppress(ValueError, OSError):
                reconfigure(errors="backslashreplace")
    parser = build_parser()
    raw = list(sys.argv[1:] if argv is None else argv)
    try:
        args = parser.parse_args(raw)
    except _UsageExit as exc:
        print(exc, file=sys.stderr)
        return EXIT_BAD_INPUT
    except SystemExit as exc:  # --help / --version
        return int(exc.code or 0)
    code = _terminable(args)
    return main(code.argv) if isinstance(code, Rerun) else code


EXIT_TERMINATED = 128 + 15  # what a shell reports for a process stopped by SIGTERM


class Terminated(BaseException):
    """SIGTERM (a Job's deadline, kill, a CI's timeout): stop as Ctrl-C does, so what was
    started (a control plane's servers, temporary directories) is cleaned up on the way out."""


def _on_term(signum: int, frame: object) -> None:
    raise Terminated


def _terminable(args: argparse.Namespace) -> int | Rerun:
    """``_dispatch`` with SIGTERM turned into ``Terminated`` while it runs (the main thread
    only: elsewhere Python keeps its own handling)."""
    try:
        previous = signal.signal(signal.SIGTERM, _on_term)
    except ValueError:  # not the main thread
        return _dispatch(args)
    try:
        return _dispatch(args)
    except Terminated:
        return EXIT_TERMINATED
    finally:
        signal.signal(signal.SIGTERM, previous)


def _error_document(exc: StandbycError) -> dict[str, object]:
    diagnostics = getattr(exc, "diagnostics", ())
    return {
        "ok": False,
        "exitCode": exc.exit_code,
        "error": exc.render(),
        "diagnostics": [d.to_json() for d in diagnostics],
    }


def _no_permission(exc: OSError) -> NoPermission:
    what = f"{exc.filename}: " if exc.filename else ""
    return NoPermission(
        f"{what}permission denied to uid {os.getuid()} ({exc.strerror}); give this user "
        "access to it (a folder it reads needs mode 0755 and its files 0644, as "
        "`standbyc schemas build` leaves the schema directory)"
    )


def _dispatch(args: argparse.Namespace) -> int | Rerun:
    """Run the command; the one place where outcomes become exit codes."""
    try:
        try:
            code: int | Rerun = args.func(args)
        except OSError as exc:
            if exc.errno in (errno.EACCES, errno.EPERM):
                raise _no_permission(exc) from None
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            # A full disk is the machine's state, not a bug: every writer removes its
            # temporary files on the way out, so the message is all that is left to do.
            # It is the one DiskFull of every command, with the weights table's code (2).
            where = f" ({exc.filename})" if exc.filename else ""
            raise WeightsFailed(
                DiskFull(
                    f"no space left on the device{where}; what was there before is unchanged "
                    "and the temporary files are removed"
                )
            ) from None
    except StandbycError as exc:
        if args.debug:
            traceback.print_exc()
        print(f"standbyc: {exc.render()}", file=sys.stderr)
        fmt = getattr(args, "format", "text")
        if fmt != "text":
            # Machines get one document on stdout whatever the outcome.
            doc = _error_document(exc)
            output.emit(output.Message(doc, "", exc.render(), exc.exit_code), fmt)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # The reader went away (`standbyc compile | head`): not a bug, and nothing to say.
        output.stdout_gone()
        return EXIT_FAILED
    except Exception:
        traceback.print_exc()
        print(
            "standbyc: internal error (a bug in standbyc); "
            "please report it with the traceback above",
            file=sys.stderr,
        )
        return EXIT_INTERNAL
    return code
