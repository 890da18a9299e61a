"""Sync and publish against hostile stores, bad indexes, bad arguments and full disks.

Each case runs the compiled cold Job's command (its paths and the store's address
rewritten) and asserts the exit code, a bound on the wall time, what is left on disk, and
that the weights the standby held are still there byte for byte.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from tests.faultserver import DATA, FaultServer
from tests.sync.conftest import (
    TIER,
    job_command,
    publish,
    run_standbyc,
    tree_bytes,
    with_arg,
    with_flag,
)
from tests.sync.conftest import held as _held
from tests.sync.conftest import leftovers as _leftovers
from tests.sync.conftest import run_sync as _sync


def test_a_server_that_answers_416_to_every_data_request(
    served: FaultServer, standby: tuple[list[str], Path]
) -> None:
    cmd, weights = standby
    before = _held(weights)
    served.faults[DATA] = "416"
    code, doc, err, took = _sync(cmd)
    assert code == 1, err
    assert "HTTP 416 (range not satisfiable) again after starting over" in doc["error"]
    assert took < 20
    assert len(served.requests("deltas/41-42.delta")) <= 6  # two tries of two, not thousands
    assert _held(weights) == before
    assert _leftovers(weights) == {}


def test_a_delta_the_index_declares_larger_than_the_file(
    served: FaultServer, standby: tuple[list[str], Path], store: Path
) -> None:
    cmd, weights = standby
    before = _held(weights)
    index = json.loads((store / "index.json").read_text())
    index["generations"][1]["delta"]["size"] += 1000
    (store / "index.json").write_text(json.dumps(index))
    code, doc, err, took = _sync(cmd)
    assert code == 1, err
    assert "the server has" in doc["error"] and "the index gives" in doc["error"]
    assert took < 20
    assert len(served.requests("deltas/41-42.delta")) <= 3  # refused at once, tried twice
    assert _held(weights) == before
    assert _leftovers(weights) == {}


def test_a_dripping_index_is_cut_off_by_the_request_deadline_and_the_budget(
    served: FaultServer, standby: tuple[list[str], Path]
) -> None:
    cmd, weights = standby
    before = _held(weights)
    served.faults["index.json"] = "drip"
    served.drip_seconds = 0.5  # the index would take many minutes
    quick = with_flag(with_flag(cmd, "--timeout", "2"), "--deadline", "6")
    code, doc, err, took = _sync(quick, timeout=60)
    assert code == 4, err
    assert "budget (--deadline) ran out" in doc["error"]
    assert 5 < took < 15
    assert _held(weights) == before


def test_an_endless_body_stops_at_the_declared_size(
    served: FaultServer, standby: tuple[list[str], Path], store: Path
) -> None:
    cmd, weights = standby
    before = _held(weights)
    served.faults[DATA] = "endless"
    declared = (store / "deltas/41-42.delta").stat().st_size
    code, doc, err, took = _sync(cmd)
    assert code == 1, err
    assert f"the body runs past the {declared} bytes the index gives" in doc["error"]
    assert took < 20
    assert _held(weights) == before
    assert _leftovers(weights) == {}  # nothing kept beyond the declared size


@pytest.mark.parametrize(
    ("fault", "code", "message"),
    [
        ("gzip", 1, "the server sent a gzip-encoded body, which standbyc did not ask for"),
        ("long", 1, "the server has"),
        ("wrong-range", 0, ""),  # the first try is whole: no range to get wrong
        ("reset", 4, "the store did not answer after 2 retries"),
    ],
)
def test_bodies_that_are_not_what_was_asked(
    served: FaultServer, standby: tuple[list[str], Path], fault: str, code: int, message: str
) -> None:
    cmd, weights = standby
    before = _held(weights)
    served.faults[DATA] = fault
    got, doc, err, took = _sync(with_flag(cmd, "--retries", "2"))
    assert got == code, err
    assert message in str(doc.get("error", ""))
    assert took < 30
    if code:
        assert _held(weights) == before
    if code == 1:
        assert _leftovers(weights) == {}


def test_a_reset_then_a_wrong_range_on_resume(
    served: FaultServer, standby: tuple[list[str], Path]
) -> None:
    cmd, weights = standby
    served.faults[DATA] = "reset"
    cmd = with_flag(cmd, "--retries", "1")
    code, _, _, _ = _sync(cmd)
    assert code == 4  # half of the delta kept for resume
    assert any(k.endswith(".part") and v > 0 for k, v in _leftovers(weights).items())
    served.faults[DATA] = "wrong-range"
    code, doc, err, took = _sync(cmd)
    assert code == 4, err
    assert "another range than asked for" in doc["error"]
    assert took < 20
    served.faults.clear()
    code, doc, err, _ = _sync(cmd)
    assert code == 0, err  # and a well-behaved server finishes it, resuming


def test_a_listed_delta_the_store_lacks(
    served: FaultServer, standby: tuple[list[str], Path], store: Path
) -> None:
    cmd, weights = standby
    before = _held(weights)
    (store / "deltas/41-42.delta").unlink()
    code, doc, err, took = _sync(cmd)
    assert code == 4, err
    assert "answers 404 for a file its index lists" in doc["error"]
    assert "Traceback" not in err
    assert took < 20
    assert _held(weights) == before


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda ix: ix.update(chunk_size=0), "chunk_size 0 must be a power of two"),
        (lambda ix: ix["generations"][0]["anchor"][0].update(name="."),
         "'.' is not a valid file name"),
        (lambda ix: ix["generations"][1]["delta"].update(path="deltas/41-42.delta\n"),
         "'deltas/41-42.delta\\n' is not a valid store path"),
        (lambda ix: ix["generations"][1].update(digest="0" * 32),
         "generations[1].digest: 00000000000000000000000000000000, but what it lists has"),
    ],
    ids=["chunk-size-0", "anchor-named-dot", "path-with-newline", "digest-promised-wrongly"],
)  # fmt: skip
def test_index_fields_that_would_crash_or_mislead_a_sync(
    served: FaultServer, standby: tuple[list[str], Path], store: Path, edit: Any, message: str
) -> None:
    cmd, weights = standby
    before = _held(weights)
    index = json.loads((store / "index.json").read_text())
    edit(index)
    (store / "index.json").write_text(json.dumps(index))
    code, doc, err, _ = _sync(cmd)
    assert code == 2, err
    assert message in doc["error"]
    assert _held(weights) == before
    assert _leftovers(weights) == {}


@pytest.mark.parametrize(
    ("flag", "value", "message"),
    [
        ("--timeout", "-1", "--timeout -1.0: seconds, above 0"),
        ("--timeout", "nan", "--timeout nan: seconds, above 0"),
        ("--source", "http://127.0.0.1:99999/", "Port out of range 0-65535"),
        ("--pushgateway", "http://[host:9091", "--pushgateway: 'http://[host:9091' is not a valid"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_touched(
    standby: tuple[list[str], Path], served: FaultServer, flag: str, value: str, message: str
) -> None:
    cmd, weights = standby
    before = _held(weights)
    code, _, err, _ = _sync(with_flag(cmd, flag, value))
    assert code == 2, err
    assert message in err
    assert "Traceback" not in err
    assert served.log == []  # not even the index was asked for
    assert _held(weights) == before


def test_a_failed_report_after_a_good_swap_is_a_warning(
    standby: tuple[list[str], Path], generations: dict[int, Path]
) -> None:
    cmd, weights = standby  # the compiled command's Pushgateway: nothing listens there
    code, doc, err, _ = _sync(cmd)
    assert code == 0, err
    assert doc["reported"] is False and doc["report_error"]
    assert _held(weights)["model.safetensors"] == generations[2].read_bytes()


@pytest.mark.parametrize("command", ["manifest", "diff", "publish"])
def test_chunk_size_zero(command: str, generations: dict[int, Path], tmp_path: Path) -> None:
    a, b = str(generations[1]), str(generations[2])
    args = {
        "manifest": ["manifest", a],
        "diff": ["diff", a, b, "-o", str(tmp_path / "d.delta")],
        "publish": ["publish", b, "--to", str(tmp_path / "store"), "--generation", "1"],
    }[command]
    proc = run_standbyc("weights", *args, "--chunk-size", "0")
    assert proc.returncode == 2, proc.stderr
    assert "--chunk-size 0: must be a power of two" in proc.stderr
    assert not (tmp_path / "store" / "index.json").exists()
    assert not (tmp_path / "d.delta").exists()


@pytest.mark.parametrize("generation", ["10000000000000000", "-1", "0"])
def test_publish_refuses_a_generation_readers_would_refuse(
    generation: str, generations: dict[int, Path], tmp_path: Path
) -> None:
    store = tmp_path / "store"
    proc = run_standbyc("weights", "publish", str(generations[1]), "--to", str(store),
                        "--generation", generation)  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "must be from 1 to 1000000000000000" in proc.stderr
    assert not store.exists() or list(store.iterdir()) == []


# --- full disks ------------------------------------------------------------------------------


def _fill(directory: Path, leave: int) -> None:
    """Fill the file system of ``directory`` up to ``leave`` free bytes."""
    st = os.statvfs(directory)
    free = st.f_bavail * st.f_frsize
    if free > leave:
        (directory / ".filler").write_bytes(b"\0" * (free - leave))


def test_sync_onto_a_file_system_that_fills(
    served: FaultServer, compiled: Path, tmp_path: Path, tmpfs: Any, generations: dict[int, Path]
) -> None:
    weights = tmpfs(tmp_path / "small", "40m")  # the model is about 12 MB
    cmd = job_command(compiled, TIER, source=served.url, weights=weights)
    code, _, err, _ = _sync(with_arg(cmd, "--generation", "41"))
    assert code == 0, err
    before = _held(weights)
    _fill(weights / TIER, 64 << 10)  # room for part of the delta, not all of it
    code, doc, err, took = _sync(cmd)
    assert code == 2, err
    assert "No space left on device" in doc["error"] or "no space left" in doc["error"]
    assert took < 20  # not retried as a network error
    assert _held(weights) == before
    assert _leftovers(weights) == {}  # the partial that filled it is gone


def test_publish_into_a_full_store(
    tmp_path: Path, tmpfs: Any, generations: dict[int, Path]
) -> None:
    store = tmpfs(tmp_path / "store", "40m")
    publish(generations[1], store, 41)
    index = (store / "index.json").read_bytes()
    before = tree_bytes(store)
    _fill(store, 1 << 20)
    proc = run_standbyc("weights", "publish", str(generations[2]), "--to", str(store),
                        "--generation", "42")  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert "no space left on the device" in proc.stderr and "Traceback" not in proc.stderr
    assert (store / "index.json").read_bytes() == index
    after = tree_bytes(store)
    after.pop(".filler", None)
    before.pop(".filler", None)
    assert after == before  # no temp file left filling it


def test_compile_into_a_full_out(tmp_path: Path, tmpfs: Any) -> None:
    root = tmpfs(tmp_path / "disk", "2m")
    specs = Path(__file__).resolve().parents[2] / "specs"
    out = root / "out"
    out.mkdir()
    (out / "mine.txt").write_text("the user's own file")
    _fill(root, 16 << 10)
    proc = run_standbyc("compile", str(specs), "--out", str(out), "--no-validate")
    assert proc.returncode == 2, proc.stderr
    assert "no space left on the device" in proc.stderr and "Traceback" not in proc.stderr
    assert sorted(p.name for p in root.iterdir()) == [".filler", "out"]  # no .out.standbyc-new
    assert tree_bytes(out) == {"mine.txt": b"the user's own file"}


def test_apply_onto_a_full_file_system(
    tmp_path: Path, tmpfs: Any, generations: dict[int, Path]
) -> None:
    disk = tmpfs(tmp_path / "disk", "30m")
    base = disk / "model.safetensors"
    base.write_bytes(generations[1].read_bytes())
    delta = tmp_path / "step.delta"
    made = run_standbyc("weights", "diff", str(generations[1]), str(generations[2]),
                        "-o", str(delta))  # fmt: skip
    assert made.returncode == 0, made.stderr
    _fill(disk, 1 << 20)
    proc = run_standbyc("weights", "apply", str(base), str(delta), "--in-place")
    assert proc.returncode == 2, proc.stderr
    assert "the filesystem has" in proc.stderr and "nothing was written" in proc.stderr
    assert base.read_bytes() == generations[1].read_bytes()
    assert sorted(p.name for p in disk.iterdir()) == [".filler", "model.safetensors"]
