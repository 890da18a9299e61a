"""A bucket of a real S3-compatible server (versitygw, built by `make tools`) for the
tests of an S3 store, and the commands that publish into it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import boto3
import pytest
from botocore.config import Config

from compiler import tools
from tests.sync.conftest import STANDBYC, free_port

BUCKET = "weights"
KEYS = {"AWS_ACCESS_KEY_ID": "AK", "AWS_SECRET_ACCESS_KEY": "SK", "AWS_REGION": "us-east-1"}


@dataclass
class S3:
    endpoint: str
    client: Any  # boto3's, to look at the bucket as another tool would

    def env(self, **over: str) -> dict[str, str]:
        """The environment of a process that reaches the bucket with the keys."""
        clean = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
        return {**clean, **KEYS, "AWS_ENDPOINT_URL": self.endpoint, **over}

    def listed(self, prefix: str = "") -> list[str]:
        pages = self.client.get_paginator("list_objects_v2").paginate(Bucket=BUCKET,
                                                                      Prefix=prefix)  # fmt: skip
        return sorted(o["Key"] for page in pages for o in page.get("Contents", []))

    def index(self) -> dict[str, Any]:
        body = self.client.get_object(Bucket=BUCKET, Key="m/index.json")["Body"].read()
        doc: dict[str, Any] = json.loads(body)
        return doc


def serve(tmp_path: Path) -> Iterator[S3]:
    """A private bucket (no policy: every request must be signed with AK/SK), for a
    fixture to yield from."""
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
    yield S3(endpoint, client)
    proc.terminate()
    proc.wait(timeout=10)


def run_env(argv: list[str], env: dict[str, str]) -> tuple[int, dict[str, Any], str]:
    proc = subprocess.run(argv, capture_output=True, text=True, env=env, timeout=120,
                          check=False)  # fmt: skip
    doc = json.loads(proc.stdout) if proc.stdout.strip().startswith("{") else {}
    return proc.returncode, doc, proc.stderr


PLAIN = ("--merge", "off")  # one-step deltas only: the routes are today's chains


def publish_argv(model: Path, generation: int, cache: Path, *extra: str) -> list[str]:
    return [str(STANDBYC), "weights", "publish", str(model), "--to", f"s3://{BUCKET}/m/",
            "--generation", str(generation), "--cache", str(cache), *extra]  # fmt: skip


def publish_s3(
    s3: S3, model: Path, generation: int, cache: Path, *extra: str, env: Any = None
) -> tuple[int, dict[str, Any], str]:
    argv = publish_argv(model, generation, cache, "--format", "json", *extra)
    return run_env(argv, env or s3.env())


def kill_mid_upload(s3: S3, model: Path, generation: int, cache: Path) -> int:
    """Publish ``model`` slowly, in 5 MiB parts, and SIGKILL it once the anchor's multipart
    upload has parts (the small files are up by then); the bytes those parts hold."""
    argv = publish_argv(model, generation, cache, "--part-size", "5MiB", "--rate-limit",
                        "40Mbit/s")  # fmt: skip
    proc = subprocess.Popen(argv, env=s3.env(), stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL)  # fmt: skip
    deadline = time.monotonic() + 30
    sent = 0
    while time.monotonic() < deadline and not sent and proc.poll() is None:
        for up in s3.client.list_multipart_uploads(Bucket=BUCKET).get("Uploads", []):
            parts = s3.client.list_parts(Bucket=BUCKET, Key=up["Key"], UploadId=up["UploadId"])
            sent = sum(p["Size"] for p in parts.get("Parts", []))
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    return sent
