"""out/ is never lost: odd --out targets, the user's foreign entries, an interrupted swap,
concurrent compiles."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from compiler import outdir
from tests.conftest import REPO, run_cli, tree


def _compile(*args: str) -> tuple[int, str]:
    result = run_cli("compile", "--no-validate", *args)
    return result.code, result.err


def test_user_entries_of_every_kind_survive(workdir: Path) -> None:
    assert _compile()[0] == 0
    out = workdir / "out"
    (out / "notes").mkdir()
    (out / "notes" / "empty").mkdir()
    (out / "link-to-specs").symlink_to("../specs")
    (out / "dangling").symlink_to("nowhere")
    os.mkfifo(out / "pipe")
    (out / "README.txt").write_text("mine\n")
    spec = workdir / "specs" / "inference-engine.yaml"
    spec.write_text(spec.read_text().replace("replicas: 3", "replicas: 2"))
    assert _compile()[0] == 0
    assert (out / "notes" / "empty").is_dir()
    assert (out / "link-to-specs").is_symlink()
    assert str((out / "link-to-specs").readlink()) == "../specs"
    assert str((out / "dangling").readlink()) == "nowhere"
    assert (out / "pipe").is_fifo()
    assert (out / "README.txt").read_text() == "mine\n"


def test_out_as_a_symlink_is_followed(workdir: Path) -> None:
    real = workdir / "real-out"
    real.mkdir()
    (workdir / "out").symlink_to("real-out")
    assert _compile()[0] == 0
    assert (workdir / "out").is_symlink()
    assert (real / "kustomization.yaml").is_file()
    assert run_cli("check").code == 0


@pytest.mark.parametrize(
    ("setup", "out", "message"),
    [
        ("file", "out", "--out out: exists and is not a directory"),
        ("dangling", "out", "--out out: a symlink to missing, which does not exist"),
        ("", ".", "--out .: would replace"),
        ("", "/", "--out /: would replace /"),
        ("", "specs/out", "--out specs/out and the spec path specs contain one another"),
    ],
)
def test_odd_out_targets_are_refused(workdir: Path, setup: str, out: str, message: str) -> None:
    if setup == "file":
        (workdir / "out").write_text("my file\n")
    elif setup == "dangling":
        (workdir / "out").symlink_to("missing")
    before = tree(workdir)
    code, err = _compile("--out", out)
    assert code == 2
    assert err.startswith(f"standbyc: {message}"), err
    assert tree(workdir) == before
    assert sorted(p.name for p in workdir.iterdir()) == sorted(
        ["specs", *(["out"] if setup else [])]
    )


def test_a_run_killed_after_the_swap_leaves_a_whole_out(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert _compile()[0] == 0
    spec = workdir / "specs" / "inference-engine.yaml"
    spec.write_text(spec.read_text().replace("replicas: 3", "replicas: 2"))

    def killed(path: object, *args: object, **kw: object) -> None:
        raise KeyboardInterrupt  # the process dies right after the exchange

    with monkeypatch.context() as patched, pytest.raises(KeyboardInterrupt):
        patched.setattr(outdir.shutil, "rmtree", killed)
        outdir.replace(workdir / "out", lambda c: {**c.owned, "x.yaml": "# standbyc: generated"})
    assert (workdir / "out" / "x.yaml").is_file()  # the new tree is in place
    assert (workdir / ".out.standbyc-new").is_dir()  # the old one waits to be removed
    assert _compile()[0] == 0
    assert sorted(p.name for p in workdir.iterdir()) == ["out", "specs"]


def test_concurrent_compiles_never_report_success_for_lost_output(tmp_path: Path) -> None:
    """Two compiles of different specs into one out/, ten times: whatever exits 0 is there."""
    for spec in ("inference-engine", "grpc-llm"):
        (tmp_path / spec).mkdir()
        shutil.copy(REPO / "specs" / f"{spec}.yaml", tmp_path / spec / "spec.yaml")
    argv = [sys.executable, "-m", "compiler", "compile", "--no-validate", "--out", "out"]
    for _ in range(10):
        shutil.rmtree(tmp_path / "out", ignore_errors=True)
        procs = {
            spec: subprocess.Popen(
                [*argv, f"{spec}/spec.yaml"],
                cwd=tmp_path,
                env={**os.environ, "PYTHONPATH": str(REPO)},
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
            )
            for spec in ("inference-engine", "grpc-llm")
        }
        codes = {spec: p.wait() for spec, p in procs.items()}
        for spec, proc in procs.items():
            err = proc.stderr.read().decode() if proc.stderr else ""
            assert codes[spec] in (0, 2), err
            if codes[spec] == 2:
                assert "another standbyc is writing out" in err
        dirs = {"inference-engine": "inference-system", "grpc-llm": "llm-serving"}
        for spec, code in codes.items():
            if code == 0:
                assert (tmp_path / "out" / dirs[spec]).is_dir(), (codes, spec)


def test_check_during_a_compile_reads_one_state_of_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A compile that swaps out/ while a check is half-way through reading it: the check
    must see the tree it started on, or the whole new one, never half of each."""
    spec = (REPO / "specs" / "inference-engine.yaml").read_text()
    for name, generation in (("v1", "42"), ("v2", "43")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "spec.yaml").write_text(
            spec.replace("generation: 42", f"generation: {generation}")
        )
    monkeypatch.chdir(tmp_path)
    assert run_cli("compile", "--no-validate", "--out", "out", "v1/spec.yaml").code == 0
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    real_scandir = os.scandir
    started: list[subprocess.Popen[bytes]] = []

    def scandir(path: Any) -> Any:
        # Half-way through the read (the spec's directory), another process compiles v2.
        if str(path).endswith("inference-system/inference-engine") and not started:
            proc = subprocess.Popen(
                [sys.executable, "-m", "compiler", "compile", "--no-validate", "--out", "out",
                 "v2/spec.yaml"], cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )  # fmt: skip
            started.append(proc)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)  # it swaps now, unless the check's lock holds it off
        return real_scandir(path)

    monkeypatch.setattr(os, "scandir", scandir)
    result = run_cli("check", "v1/spec.yaml", "--out", "out", "--format", "json")
    monkeypatch.setattr(os, "scandir", real_scandir)
    assert started and started[0].wait(timeout=60) == 0  # the compile went through after
    assert result.code == 0, result.out  # the state it started on: v1's, up to date
    assert json.loads(result.out)["stale"] == []
    after = run_cli("check", "v1/spec.yaml", "--out", "out", "--format", "json")
    assert after.code == 1 and json.loads(after.out)["stale"]  # and now it is v2's


def test_a_fifo_and_a_link_to_a_device_in_out_are_named_not_read(workdir: Path) -> None:
    assert run_cli("compile", "--no-validate").code == 0
    os.mkfifo(workdir / "out" / "extra.yaml")
    (workdir / "out" / "zero.yaml").symlink_to("/dev/zero")
    argv = [sys.executable, "-m", "compiler"]
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    for args in (["validate", "out"], ["compile"]):
        proc = subprocess.run([*argv, *args], cwd=workdir, env=env, capture_output=True,
                              text=True, timeout=300, check=False)  # fmt: skip
        assert proc.returncode == 0, proc.stderr
        if args[0] == "validate":
            for name in ("extra.yaml", "zero.yaml"):
                assert f"warning: out/{name}: not validated: not a regular file" in proc.stdout
    assert (workdir / "out" / "zero.yaml").is_symlink()  # the user's entries are kept
    assert not (workdir / ".out.standbyc-new").exists()
