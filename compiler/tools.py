"""The one wrapper for every external program standbyc runs.

Programs are found in ``$STANDBYC_TOOLS_DIR``, then the project-local
``.tools/bin`` (``make tools`` installs there), then ``$PATH``. Commands are
always argv lists; nothing goes through a shell.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from compiler.errors import ToolFailed, ToolMissing
from compiler.fsutil import user_dir

_VALIDATOR_HINT = (
    "standbyc tools install  (builds the pinned validators with Go, into {dir}); "
    "or skip validation with: standbyc compile --no-validate"
)
INSTALL_HINTS: dict[str, str] = {
    "kubeconform": _VALIDATOR_HINT,
    "promtool": _VALIDATOR_HINT,
    "pint": _VALIDATOR_HINT,
    "kubectl-kyverno": "standbyc tools install --optional (the Kyverno CLI; a long build)",
    "kube-apiserver": "standbyc tools install --optional (kube-apiserver and etcd; a long build)",
    "etcd": "standbyc tools install --optional (kube-apiserver and etcd; a long build)",
    "pushgateway": "standbyc tools install --test-servers",
    "versitygw": "standbyc tools install --test-servers",
    "kube-controller-manager": "standbyc tools install --test-servers",
    "rsync": "apt-get install rsync",
    "go": "install Go >= 1.24 (https://go.dev/dl, or apt-get install golang-go); needed only "
    "to install the validators",
}


def user_bin_dir() -> Path:
    """Where ``standbyc tools install`` puts tools by default."""
    return user_dir("bin")


def search_dirs() -> list[Path]:
    """``$STANDBYC_TOOLS_DIR``, a checkout's ``.tools/bin`` (make tools), the working
    directory's ``.tools/bin``, then the user cache (standbyc tools install)."""
    dirs: list[Path] = []
    env_dir = os.environ.get("STANDBYC_TOOLS_DIR")
    if env_dir:
        dirs.append(Path(env_dir))
    dirs.append(Path(__file__).resolve().parent.parent / ".tools" / "bin")
    dirs.append(Path.cwd() / ".tools" / "bin")
    dirs.append(user_bin_dir())
    return dirs


def find(name: str) -> Path | None:
    for d in search_dirs():
        candidate = d / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    return Path(found) if found else None


def file_id(path: Path) -> str:
    """A program as a key part: its path, size, inode and modification and change times
    (a rebuilt or replaced binary is a new tool; a change time cannot be set back)."""
    st = path.stat()
    return f"{path}:{st.st_size}:{st.st_ino}:{st.st_mtime_ns}:{st.st_ctime_ns}"


def identity(name: str) -> str:
    """The tool ``name`` as found, as a key part (``file_id``; "-": not installed)."""
    found = find(name)
    return file_id(found) if found else "-"


def install_hint(name: str) -> str:
    return INSTALL_HINTS.get(name, f"install {name}").format(dir=user_bin_dir())


def require(name: str) -> Path:
    path = find(name)
    if path is None:
        raise ToolMissing(f"{name} is not installed; install it with: {install_hint(name)}")
    return path


def _unrunnable(name: str, binary: Path, exc: OSError) -> ToolMissing:
    """A binary that is there but cannot be run (empty, truncated, another machine's):
    the machine's state, said with the install command, never a bug of standbyc's."""
    return ToolMissing(
        f"{name} at {binary} cannot be run ({exc.strerror or exc}); reinstall it with: "
        f"{install_hint(name)}"
    )


@dataclass(frozen=True)
class Result:
    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str
    seconds: float = 0.0  # wall time, so callers can report time spent in each tool

    def describe(self) -> str:
        """The command, its exit code and its indented output, for error messages."""
        lines = [f"command: {' '.join(self.argv)}", f"exit code: {self.returncode}"]
        for label, text in (("stdout", self.stdout), ("stderr", self.stderr)):
            body = text.rstrip("\n")
            lines.append(f"{label}:" + ("" if body else " (empty)"))
            lines.extend("    " + line for line in body.splitlines())
        return "\n".join(lines)


def run(
    name: str,
    args: Sequence[str],
    *,
    ok_codes: Sequence[int] = (0,),
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    timeout: float = 600.0,
    merge_stderr: bool = False,
) -> Result:
    """Run tool ``name`` with ``args``; raise ToolFailed on an exit code not in ``ok_codes``.

    ``merge_stderr`` sends stderr into stdout through one pipe, for tools (promtool) that
    write a file's header to stdout and its errors to stderr: only one pipe keeps the order.
    """
    binary = require(name)
    argv = (str(binary), *args)
    start = time.perf_counter()
    try:
        proc = subprocess.run(
            argv,
            cwd=cwd,
            env=dict(env) if env is not None else None,
            input=stdin,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT if merge_stderr else subprocess.PIPE,
            text=True,
            timeout=timeout,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise ToolFailed(
            f"{name} did not finish within {timeout:g} s\ncommand: {' '.join(argv)}"
        ) from None
    except OSError as exc:
        raise _unrunnable(name, binary, exc) from None
    seconds = time.perf_counter() - start
    result = Result(argv, proc.returncode, proc.stdout, proc.stderr or "", seconds)
    if proc.returncode not in ok_codes:
        raise ToolFailed(f"{name} failed\n{result.describe()}")
    return result


_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:  # pragma: no cover - runs in the child, before exec
    # Linux: the server is killed when the thread that started it ends, so a killed
    # standbyc (or test worker) leaves no server behind. SIGKILL, not SIGTERM: the servers
    # are throwaway, and kube-apiserver's graceful shutdown can take a minute.
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)


def start(name: str, args: Sequence[str], *, log: Path) -> subprocess.Popen[bytes]:
    """Start tool ``name`` as a server, its output to ``log``; the caller stops it. It is
    tied to the calling thread: start it from the thread that will stop it."""
    binary = require(name)
    with log.open("wb") as out:
        try:
            return subprocess.Popen(
                [str(binary), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                preexec_fn=_die_with_parent,  # noqa: PLW1509 - only sets the parent-death signal
            )
        except OSError as exc:
            raise _unrunnable(name, binary, exc) from None
