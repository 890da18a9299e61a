"""The store as an object store: a published store uploaded to a real S3-compatible
server (versitygw, built by `make tools`), index last, read by the compiled Job's command
with plain HTTP GETs (a public-read bucket policy; Range requests resume)."""

from __future__ import annotations

import json
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from compiler import tools
from tests.sync.conftest import free_port, job_command, publish, sha256, with_arg

BUCKET = "weights"


@pytest.fixture
def s3(tmp_path: Path) -> Iterator[tuple[str, Any]]:
    binary = tools.find("versitygw")
    if binary is None:
        pytest.fail("versitygw is not installed (make tools builds it into .tools/bin)")
    data = tmp_path / "s3"
    data.mkdir()
    port = free_port()
    proc = subprocess.Popen(
        [str(binary), "--access", "AK", "--secret", "SK", "--port", f"127.0.0.1:{port}",
         "--health", "/health", "-q", "posix", str(data)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    endpoint = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 15
    while True:
        try:
            with urllib.request.urlopen(f"{endpoint}/health", timeout=1):
                break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                pytest.fail("versitygw did not start")
            time.sleep(0.05)
    client = boto3.client(
        "s3", endpoint_url=endpoint, aws_access_key_id="AK", aws_secret_access_key="SK",
        region_name="us-east-1",
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )  # fmt: skip
    client.create_bucket(Bucket=BUCKET)
    policy = {
        "Version": "2012-10-17",
        "Statement": [{"Effect": "Allow", "Principal": "*", "Action": "s3:GetObject",
                       "Resource": f"arn:aws:s3:::{BUCKET}/*"}],
    }  # fmt: skip
    client.put_bucket_policy(Bucket=BUCKET, Policy=json.dumps(policy))
    yield endpoint, client
    proc.terminate()
    proc.wait(timeout=10)


def _upload(client: Any, store: Path) -> None:
    """What an object-store user runs after publish: every file, then the index last."""
    files = sorted(p for p in store.rglob("*") if p.is_file() and p.name != "index.json")
    for path in [*files, store / "index.json"]:
        client.upload_file(str(path), BUCKET, path.relative_to(store).as_posix())


def test_sync_from_an_object_store(
    s3: tuple[str, Any], generations: dict[int, Path], compiled: Path, tmp_path: Path
) -> None:
    endpoint, client = s3
    store = tmp_path / "store"
    publish(generations[1], store, 41)
    _upload(client, store)
    weights = tmp_path / "weights"
    cmd = job_command(compiled, "hot", source=f"{endpoint}/{BUCKET}/", weights=weights)
    to_41 = with_arg(cmd, "--generation", "41")
    first = subprocess.run(to_41, capture_output=True, text=True, check=False)
    assert first.returncode == 0, first.stdout + first.stderr
    publish(generations[2], store, 42)
    _upload(client, store)
    second = subprocess.run(cmd, capture_output=True, text=True, check=False)
    assert second.returncode == 0, second.stdout + second.stderr
    doc = json.loads(second.stdout)
    assert str(doc["route"]).startswith("chain of 1 delta(s) 41 -> 42: ")
    assert sha256(weights / "hot/llama-7b/model.safetensors") == sha256(generations[2])
