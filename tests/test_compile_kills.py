"""kill -9 at every file-system step of a compile: out/ is always the old tree or the new
one, never missing or mixed, the user's file survives, and the next compile finishes the
job and leaves nothing behind.

The steps are recorded once per run with a Python audit hook (every open for writing,
rename, exchange, mkdir, unlink, rmtree); then the compile is run again and killed at the
k-th step. `make test` kills at the first and last step of each phase and at every 12th;
`make fuzz` (HYPOTHESIS_PROFILE=fuzz) at every step.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO, tree

HOOK = r"""
import os, signal, sys, atexit
root = os.environ["FAULT_ROOT"]
stop = int(os.environ["FAULT_AT"])
steps = []
WRITE = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC | os.O_APPEND
def ours(path):
    if isinstance(path, int):
        return False
    path = os.fsdecode(os.fspath(path))
    return os.path.abspath(path).startswith(root)
def hook(event, args):
    if event == "open":
        path, mode, flags = args
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            mode is None and isinstance(flags, int) and flags & WRITE)
        if not writes or not ours(path):
            return
        kind = "write"
    elif event in ("os.rename", "os.remove", "os.rmdir", "os.mkdir", "os.link",
                   "os.symlink", "shutil.rmtree", "os.truncate", "os.mkfifo"):
        if not ours(args[0]):
            return
        kind = event
    elif event == "ctypes.dlsym" and args[1] == "renameat2":
        kind = "renameat2"  # looked up right before the atomic exchange
    else:
        return
    steps.append(kind)
    if len(steps) == stop:
        os.kill(os.getpid(), signal.SIGKILL)
sys.addaudithook(hook)
atexit.register(lambda: open(os.environ["FAULT_LOG"], "w").write(__import__("json").dumps(steps)))
from compiler.cli import main
sys.exit(main(sys.argv[1:]))
"""


def _compile(cwd: Path, stop: int, log: Path) -> int:
    env = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONDONTWRITEBYTECODE": "1",
           "FAULT_ROOT": str(cwd), "FAULT_AT": str(stop), "FAULT_LOG": str(log)}  # fmt: skip
    proc = subprocess.run(
        [sys.executable, "-c", HOOK, "compile", "--no-validate"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    return proc.returncode


def _owned(out: Path) -> dict[str, bytes]:
    return {k: v for k, v in tree(out).items() if k != "NOTES.md"}


@pytest.fixture(scope="module")
def scenario(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    """A project whose out/ is current, then a spec edit; the steps of the compile that
    follows, and the tree before and after it."""
    base = tmp_path_factory.mktemp("kills") / "project"
    shutil.copytree(REPO / "specs", base / "specs")
    shutil.copytree(REPO / "out", base / "out")
    (base / "out" / "NOTES.md").write_text("the user's own file\n")
    spec = base / "specs" / "inference-engine.yaml"
    spec.write_text(spec.read_text().replace("replicas: 3", "replicas: 2"))
    before = _owned(base / "out")
    done = base.parent / "done"
    shutil.copytree(base, done)
    log = base.parent / "steps.json"
    assert _compile(done, 0, log) == 0
    steps = json.loads(log.read_text())
    return {"base": base, "before": before, "after": _owned(done / "out"), "steps": steps}


PHASE = {"renameat2": "swap", "os.rename": "swap", "os.remove": "clean", "os.rmdir": "clean",
         "shutil.rmtree": "clean"}  # fmt: skip


def _chosen(steps: list[str]) -> list[int]:
    """Every step for `make fuzz`; otherwise the first and last step of each phase (staging
    the tree, the swap, removing the old tree) and every 12th."""
    if os.environ.get("HYPOTHESIS_PROFILE") == "fuzz":
        return list(range(1, len(steps) + 1))
    phases = ["", *(PHASE.get(s, "stage") for s in steps), ""]
    return [
        k for k in range(1, len(steps) + 1)
        if phases[k] != phases[k - 1] or phases[k] != phases[k + 1] or k % 12 == 0
    ]  # fmt: skip


def test_the_recorded_run_has_steps_to_kill(scenario: dict[str, object]) -> None:
    steps = scenario["steps"]
    assert isinstance(steps, list)
    assert {"renameat2", "write", "os.link", "os.mkdir", "shutil.rmtree"} <= set(steps)
    assert scenario["before"] != scenario["after"]


def test_kill_at_every_step(scenario: dict[str, object], tmp_path: Path) -> None:
    base, before, after = scenario["base"], scenario["before"], scenario["after"]
    assert isinstance(base, Path)
    steps = scenario["steps"]
    assert isinstance(steps, list)
    seen = set()
    for k in _chosen(steps):
        work = tmp_path / f"k{k}"
        shutil.copytree(base, work, symlinks=True)
        code = _compile(work, k, tmp_path / "log.json")
        assert code == -signal.SIGKILL, (k, steps[k - 1], code)
        out = _owned(work / "out")
        assert out in (before, after), (k, steps[k - 1])  # whole, never missing or mixed
        seen.add("after" if out == after else "before")
        assert (work / "out" / "NOTES.md").read_text() == "the user's own file\n"
        assert _compile(work, 0, tmp_path / "log.json") == 0  # the next run finishes it
        assert _owned(work / "out") == after
        assert sorted(p.name for p in work.iterdir()) == ["out", "specs"], k
        shutil.rmtree(work)
    assert seen == {"before", "after"}
