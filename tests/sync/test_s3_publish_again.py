"""Publishing into a bucket from a machine that is not the last publisher's: a fresh
cache, and the objects a stopped publish left behind."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import pytest

from tests.sync.conftest import job_command, run_standbyc, sha256, with_arg
from tests.sync.s3bucket import (
    BUCKET,
    S3,
    kill_mid_upload,
    publish_argv,
    publish_s3,
    run_env,
)


def _text(s3: S3, argv: list[str]) -> tuple[int, str, str]:
    proc = subprocess.run(argv, capture_output=True, text=True, env=s3.env(), timeout=120,
                          check=False)  # fmt: skip
    return proc.returncode, proc.stdout, proc.stderr


@pytest.fixture
def xor_delta(generations: dict[int, Path], tmp_path: Path) -> int:
    """The size of the delta from generation 1 to 2 made against 1's bytes."""
    out = tmp_path / "xor.delta"
    made = run_standbyc("weights", "diff", str(generations[1]), str(generations[2]), "-o",
                        str(out))  # fmt: skip
    assert made.returncode == 0, made.stderr
    return out.stat().st_size


def test_a_fresh_cache_downloads_the_base_and_says_so(
    s3: S3, generations: dict[int, Path], tmp_path: Path, xor_delta: int
) -> None:
    """A fresh CI runner makes the delta a warm cache makes (not one many times larger),
    and says what it downloads as it begins, and what it downloaded at the end."""
    assert publish_s3(s3, generations[1], 41, tmp_path / "runner-1")[0] == 0
    fresh = tmp_path / "runner-2"
    code, out, err = _text(s3, publish_argv(generations[2], 42, fresh))
    assert code == 0, err
    assert err.startswith(
        f"standbyc: s3://{BUCKET}/m/: the cache {fresh} lacks generation 41's weights; "
        f"downloading them ({generations[1].stat().st_size} bytes) for a small delta "
        "(--no-fetch-base: none, and a bigger delta)"
    ), err
    assert f"weights delta from 41: {xor_delta} bytes" in out, out
    assert (
        f"downloaded generation 41's weights ({generations[1].stat().st_size} bytes) for the "
        "delta: the cache lacked them (kept for the next one)"
    ) in out, out
    code, doc, err = publish_s3(s3, generations[3], 43, fresh)  # the cache it kept
    assert code == 0, err
    assert (doc["delta_base"], doc["base_downloaded_bytes"]) == ("anchor", 0)


def test_no_fetch_base_says_what_the_default_does(
    s3: S3, generations: dict[int, Path], tmp_path: Path, xor_delta: int
) -> None:
    assert publish_s3(s3, generations[1], 41, tmp_path / "runner-1")[0] == 0
    fresh = tmp_path / "runner-2"
    code, out, err = _text(s3, publish_argv(generations[2], 42, fresh, "--no-fetch-base"))
    assert code == 0, err
    assert "lacks generation" not in err
    assert (
        f"(against its manifest: 41's weights are not in {fresh}; without --no-fetch-base "
        "they are downloaded for an XOR delta)"
    ) in out, out
    manifest_delta = int(out.split("weights delta from 41: ", 1)[1].split(" ", 1)[0])
    assert manifest_delta > 4 * xor_delta  # what every standby would fetch


def _taken_message(keys: list[str]) -> str:
    listed = " ".join(f"s3://{BUCKET}/m/{k}" for k in keys)
    return (
        f"s3://{BUCKET}/m/: {len(keys)} object(s) of generation 42 are already there with other "
        f"content, and the index does not name them: {listed}. A publish of generation 42 "
        "that stopped left them, or one is still running. Publishing again does not clear "
        "them: publish the next generation number, or, once no publish of this generation "
        "runs, delete them"
    )


def test_a_stopped_publish_blocks_its_generation_with_its_own_exit_code(
    s3: S3, generations: dict[int, Path], compiled: Path, tmp_path: Path
) -> None:
    """A publisher killed mid-upload from one machine; the same generation from another
    (whose delta has other bytes) exits 7, not 6: a loop that publishes again on 6 would
    spin, as publishing again changes nothing. Deleting what it names clears it."""
    assert publish_s3(s3, generations[1], 41, tmp_path / "runner-1")[0] == 0
    assert kill_mid_upload(s3, generations[2], 42, tmp_path / "runner-1") > 0
    listed = s3.listed()
    assert "m/deltas/41-42.delta" in listed
    other = tmp_path / "runner-2"
    for _ in range(2):  # again: the same answer, nothing changed
        started = time.monotonic()
        code, doc, err = publish_s3(s3, generations[2], 42, other, "--no-fetch-base")
        assert code == 7, err
        assert time.monotonic() - started < 30
        assert doc["error"].startswith(_taken_message(["deltas/41-42.delta"])), doc["error"]
        assert "Traceback" not in err
        assert s3.listed() == listed
    for key in ("m/deltas/41-42.delta",):
        s3.client.delete_object(Bucket=BUCKET, Key=key)
    code, doc, err = publish_s3(s3, generations[2], 42, other, "--no-fetch-base")
    assert code == 0, err
    weights = tmp_path / "weights"
    cmd = job_command(compiled, "hot", source=f"s3://{BUCKET}/m/", weights=weights)
    code, _, err = run_env(with_arg(cmd, "--generation", "42"), s3.env())
    assert code == 0, err
    assert sha256(weights / "hot/llama-7b/model.safetensors") == sha256(generations[2])


def test_every_object_in_the_way_is_named_before_anything_is_uploaded(
    s3: S3, generations: dict[int, Path], tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    assert publish_s3(s3, generations[1], 41, cache)[0] == 0
    for key in ("m/manifests/42.json", "m/deltas/41-42.delta"):
        s3.client.put_object(Bucket=BUCKET, Key=key, Body=b"{}", Metadata={"sha256": "0" * 64})
    before = s3.listed()
    code, doc, _ = publish_s3(s3, generations[2], 42, cache)
    assert code == 7, doc
    assert doc["error"].startswith(_taken_message(["deltas/41-42.delta", "manifests/42.json"])), (
        doc["error"]
    )
    assert s3.listed() == before
    assert [g["generation"] for g in s3.index()["generations"]] == [41]


def test_the_help_says_what_clears_exit_7() -> None:
    proc = run_standbyc("weights", "publish", "--help")
    text = " ".join(proc.stdout.split())
    assert "6 another publisher wrote the index first (publish again" in text
    assert "7 objects of this generation with other content" in text
    assert "publishing again does not clear them" in text
