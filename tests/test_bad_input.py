"""Scenario-named bad specs: each gives one exact, located message and exit 2."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from compiler.load import MAX_SPEC_BYTES
from tests.conftest import run_cli

BAD = Path(__file__).resolve().parent / "bad"

DNS = (
    "is not a valid Kubernetes name (DNS-1123 label: at most 63 characters, lowercase letters, "
    "digits and '-', starting and ending with a letter or digit)"
)
BANDWIDTH_HELP = "write a number and a unit such as 25Gbit/s, 25Gbps or 3GB/s (b = bits, B = bytes)"

EXPECTED = {
    "yaml-syntax": ("10:6: YAML syntax error: did not find expected key"),
    "unknown-field": ("10:7: spec.tiers.hot.egres: unknown field 'egres'; did you mean 'egress'?"),
    "wrong-type": (
        "9:17: spec.tiers.warm.replicas: Input should be a valid integer, "
        "unable to parse string as an integer (got 'two')"
    ),
    "negative-replicas": (
        "9:17: spec.tiers.cold.replicas: Input should be greater than or equal to 0 (got -1)"
    ),
    "egress-over-link": (
        "10:5: spec.tiers: tier egress adds up to 3 x 25 Gbit/s = 75 Gbit/s, which exceeds "
        "spec.network.link 50 Gbit/s"
    ),
    "bad-unit": f"10:15: spec.tiers.hot.egress: cannot parse bandwidth '25Gbs'; {BANDWIDTH_HELP}",
    "bandwidth-without-unit": (
        "10:15: spec.tiers.hot.egress: expected a bandwidth string, got 25000000000; "
        + BANDWIDTH_HELP
    ),
    "size-in-bits": (
        "8:11: spec.model.size: size '14Gb' is in bits; sizes are in bytes "
        "(write a number and a byte unit such as 14GiB, 512MB or 2KiB)"
    ),
    "keepalive-conflict": (
        "9:22: spec.connectionPool.grpc.keepaliveTime: client keepalive 1m is shorter than the "
        "server's minimum ping interval 5m (serverMinPingInterval); the server would answer "
        "GOAWAY too_many_pings and drop connections"
    ),
    "for-shorter-than-interval": (
        "12:12: spec.alerts.failoverSpike.for: for 30s is shorter than the rule evaluation "
        "interval 1m"
    ),
    "empty": "1:1: file is empty; expected a StandbySpec document",
    "native-admission-before-1-36": (
        "8:32: spec.qos.outputs[1]: admissionPolicy needs MutatingAdmissionPolicy at "
        "admissionregistration.k8s.io/v1, which Kubernetes serves from 1.36; "
        "validation.kubernetesVersions includes 1.35: target 1.36 and later only, or use "
        "kyverno there"
    ),
    "removed-failover-knob": (
        "9:5: spec.failover.migrationParallelism: 'migrationParallelism' is no longer read: "
        "clients reconnect on their own, in parallel, and nothing in the cluster read it; the "
        "plan times re-attachment from the compiled connectionPool settings (keepalive, "
        "timeouts, reconnect backoff)"
    ),
    "bad-name": f"4:9: metadata.name: 'Inference_Engine' {DNS}",
    "injected-name": f"4:9: metadata.name: 'a\\nkind: Secret' {DNS}",
    "duplicate-key": "6:3: metadata.name: duplicate key 'name' (first defined at 4:3)",
    "two-documents": "7:1: a spec file holds exactly one StandbySpec document",
    "missing-metadata": "1:1: metadata: required field is missing",
    "cronjob-name-too-long": (
        "4:9: metadata.name: derived CronJob name "
        "'a-thirty-seven-character-engine-namex-weight-sync-cold' is 54 characters; a CronJob "
        "name has at most 52 (the API server appends 11 characters to name each of its Jobs), "
        "so shorten metadata.name (2 more objects are too long)"
    ),
    "derived-name-too-long": (
        "4:9: metadata.name: derived CronJob name "
        "'an-engine-name-that-is-fifty-one-characters-long-xy-weight-report' is 65 "
        "characters; a CronJob name has at most 52 (the API server appends 11 characters to "
        "name each of its Jobs), so shorten metadata.name (5 more objects are too long)"
    ),
    "service-name-starts-with-digit": (
        "4:9: metadata.name: derived Service name '7b-engine-weight-store' must start with a "
        "letter (a DNS-1035 label), so start metadata.name with one"
    ),
    "label-keys-collide": (
        "9:16: spec.engine.tierLabel: pod label keys 'app.kubernetes.io/name' and "
        "'app-kubernetes-io/name' both become label_app_kubernetes_io_name in "
        "kube-state-metrics (sanitised, snake_case, lower case); rename one"
    ),
    "window-under-four-scrapes": (
        "8:29: spec.alerts.bandwidthHigh.window: rate window 1m30s holds fewer than 4 scrapes "
        "at scrapeInterval 30s; with fewer, one missed scrape resolves the alert"
    ),
    "deep-nesting": "6:142: nested more than 32 levels deep; a spec is a few levels deep",
    "merge-key": (
        "4:3: metadata: YAML merge keys (<<) are not supported in a spec; write the value out"
    ),
    "custom-tag": (
        "4:9: metadata.name: YAML tag !custom is not supported in a spec; write the value out"
    ),
    "python-tag": (
        "4:9: metadata.name: YAML tag tag:yaml.org,2002:python/name:os.system is not "
        "supported in a spec; write the value out"
    ),
    "huge-integer": (
        "7:17: spec.model.generation: value is 5000 characters; at most 4096 are allowed"
    ),
    "huge-window": (
        "9:15: spec.alerts.bandwidthHigh.window: duration '18446744073709551617m' is over the "
        "maximum, a year"
    ),
    "huge-size": (
        "7:11: spec.model.size: size '99999999999999999999...999999999GiB' is over the "
        "maximum, 1 PiB"
    ),
    "control-character": "7:16: YAML error: control characters are not allowed (#x007f)",
    "bad-cron": "9:17: spec.weightSync.trigger.schedule: '61' is not a minute (0-59)",
    "s3-bad-role-arn": (
        "11:18: spec.weightSync.store.credentials.roleArn: 'arn:aws:iam::1234:role/weight-sync' "
        "is not a valid IAM role ARN (arn:aws:iam::<account>:role/<name>)"
    ),
    "s3-bad-bucket": (
        "8:12: spec.weightSync.store.url: 's3://weights/engine/../x': the key prefix may hold "
        "only letters, digits, '.', '_', '-' and '/' (no empty, '.' or '..' parts)"
    ),
    "s3-credentials-for-http": "8:7: spec.weightSync.store: credentials: only for an s3:// url",
    "not-a-mapping": (
        "1:1: expected a mapping with apiVersion, kind, metadata and spec, got a list"
    ),
    # The user never wrote failover.takeover: point at what they wrote, and at the way out.
    "hot-tier-with-no-replicas": (
        "7:21: spec.tiers.hot.replicas: the hot tier has no replicas, but a failover is "
        "planned onto it (failover.takeover defaults to hot): give it replicas, or set "
        "failover.takeover: warm"
    ),
    # Bounds that keep one spec's compile within seconds (the generated promtool series).
    "evaluation-interval-1ms": (
        "7:25: spec.alerts.evaluationInterval: 1ms is out of range: from 1s to 1h"
    ),
    "for-of-1000h": (
        "8:12: spec.alerts.weightsBehind.for: for of 41d16h at scrapeInterval 30s makes "
        "generated test series of 120000 samples; at most 3000 (keep for within 1d1h)"
    ),
    # What the weight-sync Job would refuse, refused at the spec's line and column.
    "pushgateway-url-unclosed-bracket": (
        "8:20: spec.weightSync.report.pushgateway: 'http://[host:9091' is not a valid URL: "
        "Invalid IPv6 URL"
    ),
    "store-url-port-out-of-range": (
        "8:12: spec.weightSync.store.url: 'http://store.example.com:99999/' is not a valid "
        "URL: Port out of range 0-65535"
    ),
}


@pytest.fixture
def bad_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copytree(BAD, tmp_path / "bad")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_every_bad_file_has_an_expectation() -> None:
    assert sorted(p.stem for p in BAD.glob("*.yaml")) == sorted(EXPECTED)


@pytest.mark.parametrize("scenario", sorted(EXPECTED))
def test_bad_spec(scenario: str, bad_dir: Path) -> None:
    result = run_cli("compile", f"bad/{scenario}.yaml", "--out", "out", "--no-validate")
    assert result.code == 2
    assert result.err == f"standbyc: bad/{scenario}.yaml:{EXPECTED[scenario]}\n"
    assert "Traceback" not in result.err
    assert not (bad_dir / "out").exists()


def test_non_utf8_file(bad_dir: Path) -> None:
    spec = bad_dir / "latin1.yaml"
    spec.write_bytes(b"apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\n# caf\xe9\n")
    result = run_cli("compile", "latin1.yaml", "--no-validate")
    assert result.code == 2
    assert result.err == (
        "standbyc: latin1.yaml:3:6: file is not valid UTF-8 (byte 0xe9 at offset 57)\n"
    )


def test_fifty_megabyte_file(bad_dir: Path) -> None:
    spec = bad_dir / "huge.yaml"
    size = 50 * 1024 * 1024
    with spec.open("wb") as handle:
        handle.write(b"apiVersion: standbyc.dev/v1alpha1\n")
        handle.truncate(size)
    result = run_cli("compile", "huge.yaml", "--no-validate")
    assert result.code == 2
    assert result.err == (
        f"standbyc: huge.yaml:1:1: file is {size} bytes; a spec may be at most "
        f"{MAX_SPEC_BYTES} bytes\n"
    )


def test_all_problems_of_all_specs_are_reported(bad_dir: Path) -> None:
    result = run_cli("compile", "bad/bad-unit.yaml", "bad/negative-replicas.yaml", "--no-validate")
    assert result.code == 2
    assert "bad/bad-unit.yaml:10:15" in result.err
    assert "bad/negative-replicas.yaml:9:17" in result.err


def test_same_name_twice(bad_dir: Path) -> None:
    body = (
        "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\n"
        "metadata:\n  name: twin\n  namespace: ns\n"
    )
    (bad_dir / "a.yaml").write_text(body)
    (bad_dir / "b.yaml").write_text(body)
    result = run_cli("compile", "a.yaml", "b.yaml", "--no-validate")
    assert result.code == 2
    assert (
        result.err == "standbyc: b.yaml:4:9: metadata.name: ns/twin is already defined by a.yaml\n"
    )


def test_missing_path_is_a_usage_error(bad_dir: Path) -> None:
    result = run_cli("compile", "nope.yaml")
    assert result.code == 2
    assert result.err == "standbyc: nope.yaml: no such file or directory\n"


@pytest.mark.parametrize("command", ["compile", "plan"])
def test_a_spec_path_that_is_a_symlink_loop(command: str, tmp_path: Path) -> None:
    (tmp_path / "a.yaml").symlink_to(tmp_path / "b.yaml")
    (tmp_path / "b.yaml").symlink_to(tmp_path / "a.yaml")
    extra = ["--no-validate", "--out", str(tmp_path / "out")] if command == "compile" else []
    result = run_cli(command, str(tmp_path / "a.yaml"), *extra)
    assert result.code == 2, result.err
    assert "a.yaml: cannot be resolved" in result.err and "a symlink loop" in result.err
    assert "Traceback" not in result.err


def test_unknown_option_is_a_usage_error() -> None:
    result = run_cli("compile", "--frobnicate")
    assert result.code == 2
    assert "unrecognized arguments: --frobnicate" in result.err


def test_nesting_deep_enough_to_crash_a_parser_is_refused_at_once(tmp_path: Path) -> None:
    """30,000 nested lists once exhausted the C stack (SIGSEGV after 14 s)."""
    spec = tmp_path / "deep.yaml"
    spec.write_text("apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\nmetadata: {name: x}\n"
                    "spec: " + "[" * 30000 + "]" * 30000 + "\n")  # fmt: skip
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "compiler", "compile", str(spec), "--out", str(tmp_path / "out")],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.endswith(
        "4:38: nested more than 32 levels deep; a spec is a few levels deep\n"
    )
    assert time.monotonic() - started < 10
