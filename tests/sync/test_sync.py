"""Weight sync end to end: publish into a store, nginx serves it, the compiled Job's exact
command pulls it (only its paths and URL hosts rewritten)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

from tests.sync.conftest import (
    Nginx,
    compiled_into,
    free_port,
    job_command,
    job_container,
    kill_at,
    publish,
    sha256,
    tree_bytes,
    with_arg,
)


def _sync(cmd: list[str], **kw: object) -> tuple[int, dict[str, object], str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, check=False)
    doc = json.loads(proc.stdout) if proc.stdout.strip() else {}
    return proc.returncode, doc, proc.stderr + proc.stdout


def _model(weights: Path, tier: str = "hot") -> Path:
    return weights / tier / "llama-7b" / "model.safetensors"


def _fetched(nginx: Nginx) -> list[str]:
    return [e["uri"] for e in nginx.log()]


def test_first_sync_then_already_current(
    nginx: Nginx, generations: dict[int, Path], compiled: Path, tmp_path: Path
) -> None:
    for g in (41, 42):
        publish(generations[g - 40], nginx.root, g)
    weights = tmp_path / "weights"
    cmd = job_command(compiled, "hot", source=nginx.url, weights=weights)
    assert "--pushgateway" in cmd  # the compiled default; unreachable here, so not reported
    nginx.clear_log()
    code, doc, err = _sync(cmd)
    assert code == 0, err
    assert doc["status"] == "updated" and doc["previous_generation"] is None
    assert str(doc["route"]).startswith("anchor 42: ")
    assert sha256(_model(weights)) == sha256(generations[2])
    assert _fetched(nginx) == ["/index.json", "/anchors/42/model.safetensors"]
    assert doc["reported"] is False  # nothing listens where the Pushgateway would be

    nginx.clear_log()
    code, doc, err = _sync(cmd)
    assert code == 0, err
    assert doc["status"] == "current" and doc["found_by"] == "cached"
    assert _fetched(nginx) == ["/index.json"]  # no delta or anchor bytes


def test_chain_of_deltas_when_behind(
    nginx: Nginx, generations: dict[int, Path], compiled: Path, tmp_path: Path
) -> None:
    publish(generations[1], nginx.root, 39)
    weights = tmp_path / "weights"
    cmd = job_command(compiled, "warm", source=nginx.url, weights=weights)
    # The standby holds 39 (synced then), and is three generations behind now.
    bring_to_39 = with_arg(cmd, "--generation", "39")
    assert _sync(bring_to_39)[0] == 0
    for g in (40, 41, 42):
        publish(generations[g - 38], nginx.root, g, "--merge", "off")  # the chain alone
    nginx.clear_log()
    code, doc, err = _sync(cmd)
    assert code == 0, err
    assert doc["previous_generation"] == 39
    assert str(doc["route"]).startswith("chain of 3 delta(s) 39 -> 40 -> 41 -> 42: ")
    assert _fetched(nginx) == [
        "/index.json",
        "/deltas/39-40.delta",
        "/deltas/40-41.delta",
        "/deltas/41-42.delta",
    ]
    assert sha256(_model(weights, "warm")) == sha256(generations[4])
    assert int(doc["bytes_fetched"]) < generations[4].stat().st_size // 5


def test_anchor_when_cheaper_than_the_chain(
    nginx: Nginx, generations: dict[int, Path], retrained: Path, compiled: Path, tmp_path: Path
) -> None:
    publish(generations[1], nginx.root, 40)
    weights = tmp_path / "weights"
    cmd = job_command(compiled, "cold", source=nginx.url, weights=weights)
    to_40 = with_arg(cmd, "--generation", "40")
    assert _sync(to_40)[0] == 0
    publish(retrained, nginx.root, 41)  # every element changed: a delta as large as the model
    publish(generations[2], nginx.root, 42, "--merge", "off")  # and back: another one
    nginx.clear_log()
    code, doc, err = _sync(cmd)
    assert code == 0, err
    assert str(doc["route"]).startswith("anchor 42: "), doc["route"]
    assert "next best chain of 2 delta(s) 40 -> 41 -> 42" in str(doc["route"])
    assert _fetched(nginx) == ["/index.json", "/anchors/42/model.safetensors"]
    assert sha256(_model(weights, "cold")) == sha256(generations[2])


def test_interrupted_download_resumes(
    nginx: Nginx, generations: dict[int, Path], compiled: Path, tmp_path: Path
) -> None:
    publish(generations[2], nginx.root, 42)
    weights = tmp_path / "weights"
    cmd = job_command(compiled, "hot", source=nginx.url, weights=weights)
    size = generations[2].stat().st_size
    slow = with_arg(cmd, "--rate-limit", "40Mbit/s")  # about 2 s for the anchor
    proc = subprocess.Popen(slow, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    partial = weights / "hot/.standbyc/llama-7b/downloads/anchors__42__model.safetensors.part"
    got_before = kill_at(proc, partial, size // 4)
    assert size // 4 <= got_before < size
    assert not (weights / "hot/llama-7b").exists()  # nothing swapped in
    # nginx logs the killed request once it notices the connection is gone: wait for that
    # line, so it is not taken for the resumed one.
    deadline = time.monotonic() + 10
    while not any(e["uri"].startswith("/anchors/") for e in nginx.log()):
        assert time.monotonic() < deadline, "nginx never logged the killed download"
        time.sleep(0.05)
    nginx.clear_log()
    code, doc, err = _sync(cmd)
    assert code == 0, err
    assert sha256(_model(weights)) == sha256(generations[2])
    anchor = [e for e in nginx.log() if e["uri"].startswith("/anchors/")]
    assert anchor == [
        {"uri": "/anchors/42/model.safetensors", "status": 206, "bytes": size - got_before,
         "range": f"bytes={got_before}-"}
    ]  # fmt: skip
    assert doc["resumed_bytes"] == got_before
    assert not partial.exists()


def test_corrupted_file_on_the_server_keeps_the_old_weights(
    nginx: Nginx, generations: dict[int, Path], compiled: Path, tmp_path: Path
) -> None:
    publish(generations[1], nginx.root, 41)
    weights = tmp_path / "weights"
    cmd = job_command(compiled, "hot", source=nginx.url, weights=weights)
    to_41 = with_arg(cmd, "--generation", "41")
    assert _sync(to_41)[0] == 0
    before = tree_bytes(weights / "hot/llama-7b")
    publish(generations[2], nginx.root, 42)
    delta = nginx.root / "deltas/41-42.delta"
    data = bytearray(delta.read_bytes())
    data[len(data) // 2] ^= 0xFF
    delta.write_bytes(bytes(data))
    code, doc, err = _sync(cmd)
    assert code == 1, err
    assert "deltas/41-42.delta: got" in str(doc["error"]) and "sha256" in str(doc["error"])
    assert doc["held_generation"] == 41
    assert tree_bytes(weights / "hot/llama-7b") == before
    assert not list((weights / "hot").glob("*standbyc-tmp*"))
    downloads = weights / "hot/.standbyc/llama-7b/downloads"
    assert not list(downloads.glob("*")), list(downloads.glob("*"))


def test_rate_limit_bounds_the_wall_time(
    nginx: Nginx, generations: dict[int, Path], compiled: Path, tmp_path: Path
) -> None:
    publish(generations[3], nginx.root, 42)
    cmd = job_command(compiled, "hot", source=nginx.url, weights=tmp_path / "weights")
    cmd = with_arg(cmd, "--rate-limit", "48Mbit/s")
    code, doc, err = _sync(cmd)
    assert code == 0, err
    floor = int(doc["bytes_fetched"]) * 8 / 48e6
    # The bucket starts empty and allows bursts of 64 KiB: never faster than the rate.
    assert float(doc["seconds"]) >= 0.95 * floor, (doc["seconds"], floor)
    assert floor > 1.0


def test_source_down_is_exit_4(compiled: Path, tmp_path: Path) -> None:
    cmd = job_command(
        compiled, "hot", source=f"http://127.0.0.1:{free_port()}/", weights=tmp_path / "w"
    )
    cmd[cmd.index("--format") : cmd.index("--format")] = ["--retries", "2"]
    started = time.monotonic()
    code, doc, err = _sync(cmd)
    assert code == 4, err
    assert "the store did not answer after 2 retries" in str(doc["error"])
    assert time.monotonic() - started >= 0.5  # it backed off between attempts


def test_server_errors_are_retried_then_exit_4(
    nginx: Nginx, generations: dict[int, Path], compiled: Path, tmp_path: Path
) -> None:
    cmd = job_command(compiled, "hot", source=nginx.url + "broken/", weights=tmp_path / "w")
    cmd[cmd.index("--format") : cmd.index("--format")] = ["--retries", "2"]
    nginx.clear_log()
    code, _, err = _sync(cmd)
    assert code == 4, err
    assert [(e["uri"], e["status"]) for e in nginx.log()] == [("/broken/index.json", 503)] * 3


def test_the_first_sync_says_what_it_started_from(
    nginx: Nginx, generations: dict[int, Path], compiled: Path, tmp_path: Path
) -> None:
    publish(generations[1], nginx.root, 42)
    cmd = job_command(compiled, "cold", source=nginx.url, weights=tmp_path / "weights")
    proc = subprocess.run(with_arg(cmd, "--format", "text"), capture_output=True, text=True,
                          timeout=120, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert (
        f"{tmp_path / 'weights/cold/llama-7b'}: nothing -> generation 42; weights:" in proc.stdout
    )
    assert "None" not in proc.stdout


def test_a_late_retry_of_an_older_job_never_rolls_the_tier_back(
    nginx: Nginx, generations: dict[int, Path], compiled: Path, tmp_path: Path
) -> None:
    """Generation 42's Job stays beside 43's (Jobs are named per generation): run again
    after 43 swapped in, it leaves the tier at 43 and says so. A rollback the spec asks
    for (weightSync.allowRollback, --allow-rollback in the Job) does go back."""
    for g in (41, 42, 43):
        publish(generations[g - 40], nginx.root, g)
    weights = tmp_path / "weights"
    cmd = job_command(compiled, "hot", source=nginx.url, weights=weights)
    assert "--allow-rollback" not in cmd  # the example spec does not ask for rollbacks
    code, doc, err = _sync(with_arg(cmd, "--generation", "43"))
    assert code == 0 and doc["status"] == "updated", err
    nginx.clear_log()
    code, doc, err = _sync(with_arg(cmd, "--generation", "42"))
    assert code == 0, err
    assert doc["status"] == "newer" and doc["previous_generation"] == 43
    assert doc["held_generation"] == 43
    assert sha256(_model(weights)) == sha256(generations[3])  # still 43, bit for bit
    assert _fetched(nginx) == ["/index.json"]  # nothing else asked of the store
    text = subprocess.run([*with_arg(cmd, "--generation", "42"), "--format", "text"],
                          capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert "holds generation 43, later than 42: left as it is" in text.stdout

    code, doc, err = _sync([*with_arg(cmd, "--generation", "42"), "--allow-rollback"])
    assert code == 0, err
    assert doc["status"] == "updated" and doc["previous_generation"] == 43
    assert sha256(_model(weights)) == sha256(generations[2])


def test_the_spec_asks_for_a_rollback_in_its_jobs(tmp_path: Path) -> None:
    spec = tmp_path / "back.yaml"
    spec.write_text(
        "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\nmetadata: {name: back, "
        "namespace: ml}\nspec:\n  model: {generation: 41}\n  weightSync: {allowRollback: true}\n"
    )
    out = compiled_into(tmp_path / "out", spec)
    for tier in ("hot", "warm", "cold"):
        assert "--allow-rollback" in job_container(out, tier, "ml/back")["args"]
