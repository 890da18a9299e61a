"""The store in a bucket of a real S3-compatible server (versitygw, built by `make tools`):
published with `--to s3://`, read by the compiled Job's command from a private bucket with
signed requests, or from a public-read one with plain GETs."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.conftest import REPO
from tests.sync.conftest import (
    STANDBYC,
    free_port,
    job_command,
    kill_at,
    publish,
    sha256,
    with_arg,
)
from tests.sync.s3bucket import (
    BUCKET,
    PLAIN,
    S3,
    kill_mid_upload,
    publish_argv,
    publish_s3,
    run_env,
)


def _upload(client: Any, store: Path) -> None:
    """Another tool's upload of a store directory: every file, then the index last."""
    files = sorted(p for p in store.rglob("*") if p.is_file() and p.name != "index.json")
    for path in [*files, store / "index.json"]:
        client.upload_file(str(path), BUCKET, path.relative_to(store).as_posix())


def _published(s3: S3, model: Path, generation: int, tmp_path: Path) -> None:
    """``model`` published as ``generation`` into a directory, uploaded to the bucket."""
    store = tmp_path / "store"
    publish(model, store, generation)
    _upload(s3.client, store)


def test_sync_from_a_public_bucket_with_plain_gets(
    s3: S3, generations: dict[int, Path], compiled: Path, tmp_path: Path
) -> None:
    policy = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                       "Resource": f"arn:aws:s3:::{BUCKET}/*"}],
    }  # fmt: skip
    s3.client.put_bucket_policy(Bucket=BUCKET, Policy=json.dumps(policy))
    _published(s3, generations[1], 41, tmp_path)
    weights = tmp_path / "weights"
    cmd = job_command(compiled, "hot", source=f"{s3.endpoint}/{BUCKET}/", weights=weights)
    code, _, err = run_env(with_arg(cmd, "--generation", "41"), s3.env())
    assert code == 0, err
    _published(s3, generations[2], 42, tmp_path)
    code, doc, err = run_env(cmd, s3.env())
    assert code == 0, err
    assert str(doc["route"]).startswith("chain of 1 delta(s) 41 -> 42: ")
    assert sha256(weights / "hot/llama-7b/model.safetensors") == sha256(generations[2])


def test_sync_from_a_private_bucket_signs_every_request(
    s3: S3, generations: dict[int, Path], compiled: Path, tmp_path: Path
) -> None:
    _published(s3, generations[1], 41, tmp_path)
    weights = tmp_path / "weights"
    cmd = job_command(compiled, "hot", source=f"s3://{BUCKET}/", weights=weights)
    plain = job_command(compiled, "hot", source=f"{s3.endpoint}/{BUCKET}/", weights=weights)
    code, doc, _ = run_env(with_arg(plain, "--generation", "41"), s3.env())
    assert code == 4, doc  # unsigned GETs of a private bucket: refused, nothing written
    assert "HTTP 403" in doc["error"]
    code, doc, err = run_env(with_arg(cmd, "--generation", "41"), s3.env())
    assert code == 0, err
    assert sha256(weights / "hot/llama-7b/model.safetensors") == sha256(generations[1])


def test_sync_with_keys_from_a_profile(
    s3: S3, generations: dict[int, Path], compiled: Path, tmp_path: Path
) -> None:
    store = tmp_path / "store"
    publish(generations[1], store, 41)
    _upload(s3.client, store)
    creds = tmp_path / "credentials"
    creds.write_text("[default]\naws_access_key_id = nope\naws_secret_access_key = nope\n"
                     "[standby]\naws_access_key_id = AK\naws_secret_access_key = SK\n")  # fmt: skip
    env = {k: v for k, v in s3.env().items() if not k.startswith("AWS_")}
    env |= {"AWS_SHARED_CREDENTIALS_FILE": str(creds), "AWS_CONFIG_FILE": str(tmp_path / "none"),
            "AWS_ENDPOINT_URL": s3.endpoint}  # fmt: skip
    weights = tmp_path / "weights"
    cmd = job_command(compiled, "hot", source=f"s3://{BUCKET}", weights=weights)
    code, doc, err = run_env([*with_arg(cmd, "--generation", "41"), "--profile", "standby"], env)
    assert code == 0, err
    code, doc, _ = run_env(with_arg(cmd, "--generation", "41"), env | {"AWS_PROFILE": "x"})
    assert code == 2, doc
    assert "The config profile (x) could not be found" in doc["error"]


@pytest.mark.parametrize(
    "case",
    [
        ({"AWS_SECRET_ACCESS_KEY": "wrong"}, "SignatureDoesNotMatch"),
        ({"AWS_ACCESS_KEY_ID": "NOBODY"}, "XAdminUserNotFound"),  # AWS: InvalidAccessKeyId
    ],
)
def test_sync_with_a_wrong_key_is_exit_2_and_says_why(
    s3: S3, generations: dict[int, Path], compiled: Path, tmp_path: Path, case: tuple[Any, str]
) -> None:
    over, said = case
    _published(s3, generations[1], 41, tmp_path)
    weights = tmp_path / "weights"
    cmd = job_command(compiled, "hot", source=f"s3://{BUCKET}/", weights=weights)
    t0 = time.monotonic()
    code, doc, _ = run_env(with_arg(cmd, "--generation", "41"), s3.env(**over))
    assert code == 2, doc
    assert time.monotonic() - t0 < 10  # refused at once, not retried
    assert doc["error"].startswith(
        f"s3://{BUCKET}/: the store refused the request with the credentials from env ({said}"
    ), doc["error"]
    assert not (weights / "hot/llama-7b").exists()


def test_sync_killed_mid_download_from_s3_resumes(
    s3: S3, generations: dict[int, Path], compiled: Path, tmp_path: Path
) -> None:
    _published(s3, generations[2], 42, tmp_path)
    weights = tmp_path / "weights"
    cmd = job_command(compiled, "hot", source=f"s3://{BUCKET}/", weights=weights)
    size = generations[2].stat().st_size
    slow = with_arg(cmd, "--rate-limit", "40Mbit/s")  # about 2 s for the anchor
    proc = subprocess.Popen(slow, env=s3.env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    partial = weights / "hot/.standbyc/llama-7b/downloads/anchors__42__model.safetensors.part"
    got_before = kill_at(proc, partial, size // 4)
    assert size // 4 <= got_before < size
    code, doc, err = run_env(cmd, s3.env())
    assert code == 0, err
    assert doc["resumed_bytes"] == got_before
    assert doc["bytes_fetched"] < size - got_before + size // 10, doc
    assert sha256(weights / "hot/llama-7b/model.safetensors") == sha256(generations[2])


def test_publish_to_a_private_bucket_then_sync(
    s3: S3, generations: dict[int, Path], compiled: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    code, doc, err = publish_s3(s3, generations[1], 41, cache, *PLAIN)
    assert code == 0, err
    assert doc["new_store"] is True
    code, doc, err = publish_s3(s3, generations[2], 42, cache, *PLAIN)
    assert code == 0, err
    assert (doc["new_store"], doc["delta_from"], doc["delta_base"]) == (False, 41, "anchor")
    xor_delta = doc["delta_bytes"]
    # The cache holds the latest anchor and what the next patches need, nothing else.
    cached = sorted(p.relative_to(cache).as_posix() for p in cache.rglob("*") if p.is_file())
    assert [p for p in cached if not p.startswith(".")] == [
        "anchors/42/model.safetensors", "index.json"
    ]  # fmt: skip
    # Without the cache (another machine), told not to download: against 42's manifest.
    code, doc, err = publish_s3(s3, generations[3], 43, tmp_path / "elsewhere",
                                "--no-fetch-base", *PLAIN)  # fmt: skip
    assert code == 0, err
    assert (doc["delta_from"], doc["delta_base"]) == (42, "manifest")
    assert doc["delta_bytes"] > 4 * xor_delta  # changed chunks whole, not XORed
    assert doc["base_downloaded_bytes"] == 0
    # By default the latest anchor is downloaded (resumable, verified) for an XOR delta.
    code, doc, err = publish_s3(s3, generations[4], 44, tmp_path / "third", *PLAIN)
    assert code == 0, err
    assert (doc["delta_from"], doc["delta_base"]) == (43, "anchor")
    assert doc["base_downloaded_bytes"] == generations[3].stat().st_size
    assert doc["delta_bytes"] < 2 * xor_delta
    keys = s3.listed("m/")
    assert "m/index.json" in keys and "m/deltas/42-43.delta" in keys
    assert [g["generation"] for g in s3.index()["generations"]] == [41, 42, 43, 44]
    assert not s3.client.list_multipart_uploads(Bucket=BUCKET).get("Uploads")
    weights = tmp_path / "weights"
    cmd = job_command(compiled, "hot", source=f"s3://{BUCKET}/m", weights=weights)
    code, _, err = run_env(with_arg(cmd, "--generation", "41"), s3.env())
    assert code == 0, err
    code, doc, err = run_env(with_arg(cmd, "--generation", "44"), s3.env())
    assert code == 0, err
    assert str(doc["route"]).startswith("chain of 3 delta(s) 41 -> 42 -> 43 -> 44: ")
    assert sha256(weights / "hot/llama-7b/model.safetensors") == sha256(generations[4])


def test_publish_to_s3_merges_deltas_from_a_cache_that_lacked_them(
    s3: S3, generations: dict[int, Path], compiled: Path, tmp_path: Path
) -> None:
    """A publish on a machine whose cache has none of the chain downloads the one-step
    deltas it merges (verified), uploads the merged ones, and a standby three behind
    fetches one delta."""
    cache = tmp_path / "cache"
    for g in (39, 40, 41):
        code, doc, err = publish_s3(s3, generations[g - 38], g, cache)
        assert code == 0, err
    chain = sorted(p.name for p in (cache / "deltas").iterdir())
    assert chain == ["39-40.delta", "40-41.delta"]  # what the next merges read
    weights = tmp_path / "weights"
    cmd = job_command(compiled, "hot", source=f"s3://{BUCKET}/m", weights=weights)
    code, _, err = run_env(with_arg(cmd, "--generation", "39"), s3.env())
    assert code == 0, err
    elsewhere = tmp_path / "elsewhere"  # another machine: no anchor, no deltas
    code, doc, err = publish_s3(s3, generations[4], 42, elsewhere)
    assert code == 0, err
    assert doc["chain_downloaded_bytes"] > 0, doc
    assert not doc["merge_stopped"], doc
    from_bases = [m["from"] for m in doc["merged"]]
    listed = {m["from"] for m in s3.index()["generations"][-1].get("merged", [])}
    assert set(from_bases) == listed and listed, doc
    assert all(f"m/deltas/{f}-42.delta" in s3.listed("m/deltas/") for f in listed)
    code, doc, err = run_env(with_arg(cmd, "--generation", "42"), s3.env())
    assert code == 0, err
    assert str(doc["route"]).startswith("chain of 1 delta(s) 39 -> 42 (merged 39-42): ")
    assert sha256(weights / "hot/llama-7b/model.safetensors") == sha256(generations[4])


def test_publish_with_a_wrong_key_is_exit_2_and_writes_nothing(
    s3: S3, generations: dict[int, Path], tmp_path: Path
) -> None:
    env = s3.env(AWS_SECRET_ACCESS_KEY="wrong")
    code, doc, _ = publish_s3(s3, generations[1], 41, tmp_path / "cache", env=env)
    assert code == 2, doc
    assert doc["error"].startswith(
        f"s3://{BUCKET}/m/: the store refused the request with the credentials from env "
        "(SignatureDoesNotMatch"
    ), doc["error"]
    assert s3.listed() == []


def test_publish_into_a_prefix_that_lost_its_index_is_refused(
    s3: S3, generations: dict[int, Path], tmp_path: Path
) -> None:
    assert publish_s3(s3, generations[1], 41, tmp_path / "cache")[0] == 0
    s3.client.delete_object(Bucket=BUCKET, Key="m/index.json")
    before = s3.listed()
    code, doc, _ = publish_s3(s3, generations[2], 42, tmp_path / "cache")
    assert code == 2, doc
    assert doc["error"].startswith(
        f"s3://{BUCKET}/m/: no index.json, but it holds m/anchors/41/model.safetensors: a store "
        "that lost its index"
    ), doc["error"]
    assert s3.listed() == before


def test_two_concurrent_publishers_one_wins_the_other_exits_6(
    s3: S3, generations: dict[int, Path], tmp_path: Path
) -> None:
    assert publish_s3(s3, generations[1], 41, tmp_path / "cache-a")[0] == 0
    # Two pipelines on two machines (two caches), at once, each slowed so that both read
    # the index before either writes it.
    procs = {}
    for g in (42, 43):
        argv = publish_argv(generations[g - 40], g, tmp_path / f"c{g}", "--rate-limit",
                             "40Mbit/s", "--format", "json")  # fmt: skip
        procs[g] = subprocess.Popen(argv, env=s3.env(), stdout=subprocess.PIPE,
                                    stderr=subprocess.PIPE, text=True)  # fmt: skip
    done = {g: (p.wait(timeout=120), *p.communicate()) for g, p in procs.items()}
    codes = sorted(code for code, _, _ in done.values())
    assert codes == [0, 6], done
    winner = next(g for g, (code, _, _) in done.items() if code == 0)
    loser = 85 - winner
    out = json.loads(done[loser][1])
    assert out["error"] == (
        f"s3://{BUCKET}/m/index.json: another publish replaced the index after this one read "
        "it; this publish's objects were removed and the store is as the other left it. "
        "Publish again: it starts from the new index"
    )
    assert [g["generation"] for g in s3.index()["generations"]] == [41, winner]
    assert not [k for k in s3.listed() if f"/{loser}" in k or f"-{loser}." in k]
    # The loser publishes again (as 44: generations only grow), on top of the winner.
    code, doc, err = publish_s3(s3, generations[loser - 40], 44, tmp_path / f"c{loser}")
    assert code == 0, err
    assert doc["delta_from"] == winner


def test_publish_killed_mid_upload_leaves_the_index_valid_and_a_rerun_resumes(
    s3: S3, generations: dict[int, Path], compiled: Path, tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    assert publish_s3(s3, generations[1], 41, cache)[0] == 0
    index_before = s3.index()
    size = generations[2].stat().st_size
    sent = kill_mid_upload(s3, generations[2], 42, cache)
    assert 0 < sent < size
    assert s3.index() == index_before  # the index is the old one, and whole
    weights = tmp_path / "weights"
    cmd = job_command(compiled, "hot", source=f"s3://{BUCKET}/m/", weights=weights)
    code, _, err = run_env(with_arg(cmd, "--generation", "41"), s3.env())
    assert code == 0, err  # readers are not disturbed
    code, doc, err = publish_s3(s3, generations[2], 42, cache, "--part-size", "5MiB")
    assert code == 0, err
    assert doc["upload_resumed_bytes"] == sent
    assert doc["uploaded_bytes"] < size - sent + size // 4, doc
    assert not s3.client.list_multipart_uploads(Bucket=BUCKET).get("Uploads")
    code, doc, err = run_env(with_arg(cmd, "--generation", "42"), s3.env())
    assert code == 0, err
    assert sha256(weights / "hot/llama-7b/model.safetensors") == sha256(generations[2])


def _as_the_pod_runs(
    job: Path, s3: S3, weights: Path, secrets: dict[str, dict[str, str]], tmp_path: Path
) -> tuple[list[str], dict[str, str]]:
    """A golden Job's command and env as its pod would have them: env values and Secret
    keys resolved, a mounted Secret's files at a local directory, the endpoint, target and
    Pushgateway pointed here."""
    pod = yaml.safe_load(job.read_text())["spec"]["template"]["spec"]
    container = pod["containers"][0]
    mounts = {}
    for volume in pod["volumes"]:
        if "secret" in volume:
            where = tmp_path / "mounted" / volume["name"]
            where.mkdir(parents=True)
            for key, value in secrets[volume["secret"]["secretName"]].items():
                (where / key).write_text(value)
            mounts[volume["name"]] = where
    paths = {m["mountPath"]: mounts[m["name"]] for m in container["volumeMounts"]
             if m["name"] in mounts}  # fmt: skip
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    for var in container.get("env", []):
        if "value" in var:
            value = var["value"]
            for mount, local in paths.items():
                value = value.replace(mount, str(local))
            env[var["name"]] = value
        else:
            ref = var["valueFrom"]["secretKeyRef"]
            found = secrets[ref["name"]].get(ref["key"])
            assert found is not None or ref.get("optional"), ref
            if found is not None:
                env[var["name"]] = found
    argv = [str(STANDBYC)]
    args = iter(container["args"])
    for arg in args:
        argv.append(arg)
        if arg == "--endpoint-url":
            next(args)
            argv.append(s3.endpoint)
        elif arg == "--target":
            argv.append(str(weights / next(args).removeprefix("/weights/")))
        elif arg == "--pushgateway":
            next(args)
            argv.append(f"http://127.0.0.1:{free_port()}")
    env.setdefault("AWS_ENDPOINT_URL", s3.endpoint)  # AWS's own endpoint, in a test
    return argv, env


@pytest.mark.parametrize(
    "job",
    [
        ("s3-keys", "weights",
         {"weights-reader": {"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK"}}),
        ("s3-profile", "team-weights",
         {"aws-profiles": {"credentials": "[weight-reader]\naws_access_key_id = AK\n"
                                          "aws_secret_access_key = SK\n"}}),
    ],
)  # fmt: skip
def test_the_compiled_jobs_credentials_open_a_private_bucket(
    s3: S3, generations: dict[int, Path], tmp_path: Path, job: tuple[str, str, Any]
) -> None:
    """The golden Job of each credential kind, run as its pod would run it."""
    case, bucket, secrets = job
    if bucket != BUCKET:
        s3.client.create_bucket(Bucket=bucket)
    code, _, err = run_env(
        [str(STANDBYC), "weights", "publish", str(generations[1]), "--to",
         f"s3://{bucket}/mistral/", "--generation", "7", "--cache", str(tmp_path / "cache")],
        s3.env(),
    )  # fmt: skip
    assert code == 0, err
    path = REPO / "tests/cases" / case / "expected/serving/bucket/job-bucket-weight-sync-hot.yaml"
    weights = tmp_path / "weights"
    argv, env = _as_the_pod_runs(path, s3, weights, secrets, tmp_path)
    code, doc, err = run_env(argv, env)
    assert code == 0, err
    assert sha256(weights / "hot/mistral/model.safetensors") == sha256(generations[1])
    wrong = {name: {k: v.replace("SK", "nope") for k, v in keys.items()}
             for name, keys in secrets.items()}  # fmt: skip
    shutil.rmtree(tmp_path / "mounted", ignore_errors=True)
    argv, env = _as_the_pod_runs(path, s3, tmp_path / "other", wrong, tmp_path)
    code, doc, _ = run_env(argv, env)
    assert code == 2, doc
    assert "SignatureDoesNotMatch" in doc["error"]
