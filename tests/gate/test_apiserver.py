"""The API server's verdict: every golden tree dry-run by a real kube-apiserver at every
matrix version, eight one-field mutations it refuses while kubeconform passes them, and
``standbyc validate --apiserver`` end to end."""

from __future__ import annotations

import base64
import copy
import http.client
import json
import os
import signal
import ssl
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from compiler import kinds, tools, yamlio
from compiler.gate import DEFAULT_KUBE_VERSIONS, apiserver, kubeconform, schemas
from compiler.gate import pins as pinfile
from compiler.gate.apiserver import Item, judge
from compiler.gate.controlplane import ControlPlane, ec_private_key_pem, emulable, remove_leftovers
from compiler.gate.wrapper import staged_modules, wrapper_gomod
from tests import cluster
from tests.conftest import OUT, REPO, golden_trees, golden_versions, run_cli

PINS = pinfile.load()
ENGINE = "inference-system/inference-engine"
GRPC = "llm-serving/llm-grpc"


def _errors(found: list[Any]) -> list[str]:
    return [f.render() for f in found if f.severity == "error"]


@pytest.mark.parametrize(
    "tree", sorted({t for _, t in golden_trees()}), ids=lambda p: p.parent.name
)
def test_every_golden_tree_is_accepted_at_every_version(
    control_plane: ControlPlane, tree: Path
) -> None:
    """The server accepts every object the golden trees hold, and the sample objects of
    their Kyverno tests; its only warning is the deprecation of Kyverno's ClusterPolicy,
    which carries standbyc's reason."""
    fixtures = cluster.kyverno_fixtures(tree)
    objects = cluster.objects(tree) + fixtures
    assert len(objects) >= 10
    assert {f.kind for f in fixtures} <= {"Pod", "Deployment"}
    # At the versions the tree's specs target (native admission policies: 1.36 and later).
    versions = golden_versions(tree) or DEFAULT_KUBE_VERSIONS
    plane = cluster.only(control_plane, versions)
    found = judge(plane, objects, PINS)
    assert _errors(found) == []
    warned = {(f.kind, f.message) for f in found}
    assert {kind for kind, _ in warned} <= {"ClusterPolicy"}
    for _, message in warned:
        assert "kyverno.io/v1 ClusterPolicy is deprecated" in message
        assert kinds.KYVERNO_NOT_YET in message
    # the same warning at each version: one finding per object and version
    policies = sum(item.kind == "ClusterPolicy" for item in objects)
    assert len(found) == policies * len(versions)


def _set(path: tuple[Any, ...], value: Any) -> Callable[[dict[str, Any]], None]:
    def mutate(obj: dict[str, Any]) -> None:
        node = obj
        for key in path[:-1]:
            node = node.setdefault(key, {}) if isinstance(key, str) else node[key]
        node[path[-1]] = value

    return mutate


def _duplicate_port(obj: dict[str, Any]) -> None:
    obj["spec"]["ports"].append(copy.deepcopy(obj["spec"]["ports"][0]))


# (file under out/, the mutation, what the server says) for the kind of bug a compiler
# can introduce; kubeconform's schemas cannot see any of them.
MUTATIONS = {
    "deployment selector not matching its template": (
        f"{ENGINE}/deployment-inference-engine-weight-store.yaml",
        _set(("spec", "selector", "matchLabels"), {"app": "something-else"}),
        "`selector` does not match template `labels`",
    ),
    "CronJob name of 58 characters": (
        f"{ENGINE}/cronjob-inference-engine-weight-report.yaml",
        _set(("metadata", "name"), "w" * 58),
        "must be no more than 52 characters",
    ),
    "schedule 61 * * * *": (
        f"{ENGINE}/cronjob-inference-engine-weight-report.yaml",
        _set(("spec", "schedule"), "61 * * * *"),
        "61 * * * *",
    ),
    "DestinationRule connectTimeout 500us (Istio's CEL rule)": (
        f"{GRPC}/destinationrule-llm-grpc-connection-pool.yaml",
        _set(("spec", "trafficPolicy", "connectionPool", "tcp", "connectTimeout"), "500us"),
        "connectTimeout",
    ),
    "ConfigMap key 'bad key!'": (
        f"{ENGINE}/configmap-inference-engine-connection-pool.yaml",
        _set(("data", "bad key!"), "x"),
        "a valid config key must consist of",
    ),
    "label value of 70 characters": (
        f"{ENGINE}/serviceaccount-inference-engine-weight-sync.yaml",
        _set(("metadata", "labels", "team"), "v" * 70),
        "must be no more than 63 bytes",
    ),
    "duplicated Service port": (
        f"{ENGINE}/service-inference-engine-weight-store.yaml",
        _duplicate_port,
        'duplicate entries for key [port=8080,protocol="TCP"]',
    ),
    "Job with restartPolicy Always": (
        f"{ENGINE}/job-inference-engine-weight-sync-hot.yaml",
        _set(("spec", "template", "spec", "restartPolicy"), "Always"),
        'valid values: "OnFailure", "Never"',
    ),
}


def _mutated(rel: str, mutate: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
    (obj,) = yamlio.read_back((OUT / rel).read_text())
    mutate(obj)
    return dict(obj)


@pytest.mark.parametrize("what", list(MUTATIONS))
def test_a_mutation_kubeconform_passes_is_refused_by_the_api_server(
    control_plane: ControlPlane, schema_dir: Path, tmp_path: Path, what: str
) -> None:
    rel, mutate, says = MUTATIONS[what]
    obj = _mutated(rel, mutate)
    (tmp_path / "object.yaml").write_text(yamlio.dump(obj))
    sd = schemas.ensure(schema_dir, DEFAULT_KUBE_VERSIONS)
    for version in DEFAULT_KUBE_VERSIONS:  # kubeconform alone: valid
        run = kubeconform.run(sd, version, ["object.yaml"], cwd=tmp_path, display_root="")
        assert (run.version.valid, run.findings) == (1, ()), (version, run.findings)
    # the object as compiled is accepted, mutated it is refused at every version
    (original,) = yamlio.read_back((OUT / rel).read_text())
    assert _errors(judge(control_plane, [Item(rel, dict(original))], PINS)) == []
    found = judge(control_plane, [Item(rel, obj)], PINS)
    errors = [f for f in found if f.severity == "error"]
    assert sorted(v for f in errors for v in f.kube_versions) == sorted(DEFAULT_KUBE_VERSIONS)
    for f in errors:
        assert (f.file, f.kind, f.tool) == (rel, obj["kind"], "kube-apiserver")
        assert says in f.message, f.message


def test_validate_apiserver_names_file_object_and_the_servers_message(
    tmp_path: Path, need: Callable[..., None]
) -> None:
    """The CLI starts its own control plane: one mutated object in a copy of out/ fails
    the gate (exit 1) with its file, object and the server's message, at each version."""
    need("kubeconform", "promtool", "kube-apiserver", "etcd")
    tree = tmp_path / "out"
    for source in sorted(OUT.rglob("*")):
        target = tree / source.relative_to(OUT)
        if source.is_dir():
            target.mkdir(parents=True, exist_ok=True)
        else:
            target.write_bytes(source.read_bytes())
    rel, mutate, says = MUTATIONS["Job with restartPolicy Always"]
    text = (OUT / rel).read_text()
    header = text.split("\n", 1)[0]
    (tree / rel).write_text(header + "\n" + yamlio.dump(_mutated(rel, mutate)))
    run = run_cli("validate", str(tree), "--apiserver", "--format", "json")
    assert run.code == 1, run.err
    report = json.loads(run.out)
    server = [f for f in report["findings"] if f["tool"] == "kube-apiserver"]
    errors = [f for f in server if f["severity"] == "error"]
    assert len(errors) == 1, errors
    (error,) = errors
    assert error["file"] == f"{tree}/{rel}"
    assert (error["kind"], error["name"]) == ("Job", _mutated(rel, mutate)["metadata"]["name"])
    assert error["pointer"] == "/spec/template/spec/restartPolicy"
    assert says in error["message"]
    assert error["kube_versions"] == list(DEFAULT_KUBE_VERSIONS)
    warnings = [f for f in server if f["severity"] == "warning"]
    assert {f["kind"] for f in warnings} == {"ClusterPolicy"}
    assert report["apiserver"].startswith(f"{len(cluster.objects(tree))} objects dry-run at ")
    assert "kube-apiserver" in report["tool_seconds"]


def test_without_the_binaries_the_gate_says_how_to_install_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, need: Callable[..., None]
) -> None:
    """Asked for and missing is an error (exit 2), so a CI that lost its tools fails."""
    need("kubeconform", "promtool")
    found = tools.find
    monkeypatch.setattr(
        tools, "find", lambda name: None if name in ("kube-apiserver", "etcd") else found(name)
    )
    run = run_cli("validate", str(OUT), "--apiserver")
    assert run.code == 2, run.out
    hint = tools.install_hint("kube-apiserver")
    assert "standbyc tools install --optional" in hint
    assert run.err == (
        f"standbyc: --apiserver asked, but kube-apiserver, etcd not installed; install: {hint}\n"
    )
    assert run_cli("validate", str(OUT)).code == 0  # not asked: not needed


@pytest.mark.parametrize("binary", ["kube-apiserver", "etcd"])
@pytest.mark.parametrize("broken", ["empty", "not a program"])
def test_a_server_binary_that_cannot_run_is_exit_2_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, need: Callable[..., None],
    binary: str, broken: str,
) -> None:  # fmt: skip
    need("kubeconform", "promtool", "kube-apiserver", "etcd")
    bad = tmp_path / "bin" / binary
    bad.parent.mkdir()
    bad.write_bytes(b"" if broken == "empty" else b"\x7fELF\x02\x01garbage")
    bad.chmod(0o755)
    found = tools.find
    monkeypatch.setattr(tools, "find", lambda name: bad if name == binary else found(name))
    run = run_cli("validate", str(OUT / ENGINE), "--apiserver")
    assert run.code == 2, run.err
    assert f"{binary} at {bad} cannot be run (" in run.err
    assert "a bug in standbyc" not in run.err


def test_emulation_covers_three_minors_back_and_says_what_it_does_not() -> None:
    assert emulable(37, ["1.33", "1.34", "1.37", "1.38"]) == (["1.34", "1.37"], ["1.33", "1.38"])
    outcome, status = apiserver.run([("x.yaml", [])], ["1.32"])
    (warning,) = outcome.findings
    assert "emulates 1.34 to 1.37; not dry-run at 1.32" in warning.message
    assert status.startswith("0 objects dry-run at no version")


def test_the_service_account_key_is_a_p256_key_in_sec1_form() -> None:
    pem = ec_private_key_pem()
    lines = pem.strip().splitlines()
    assert (lines[0], lines[-1]) == (
        "-----BEGIN EC PRIVATE KEY-----",
        "-----END EC PRIVATE KEY-----",
    )
    der = base64.b64decode("".join(lines[1:-1]))
    assert der[:2] == b"\x30\x31" and der[2:7] == b"\x02\x01\x01\x04\x20"
    assert der[-10:] == bytes.fromhex("06082a8648ce3d030107")  # prime256v1
    assert ec_private_key_pem() != pem


def test_the_wrapper_module_replaces_the_staging_modules_kubernetes_requires() -> None:
    """From kubernetes' own go.mod (offline, from the module cache): every staging module
    it requires is replaced with the pinned staging version; its samples, which it
    replaces but does not require, are not."""
    pin = PINS.tools["kube-apiserver"]
    module = schemas.module_dir(pin.module, pin.version, allow_network=False)
    gomod = (module / "go.mod").read_text()
    staged = staged_modules(gomod)
    assert "k8s.io/api" in staged and "k8s.io/client-go" in staged
    assert "k8s.io/sample-controller" not in staged and "k8s.io/sample-cli-plugin" not in staged
    text = wrapper_gomod(pin, gomod)
    assert f"require k8s.io/kubernetes {pin.version}\n" in text
    assert text.count(" => ") == len(staged) >= 30
    assert f"\tk8s.io/api => k8s.io/api {pin.staging}\n" in text


def test_the_built_binaries_are_the_pinned_versions(need: Callable[..., None]) -> None:
    need("kube-apiserver", "etcd")
    kube = tools.run("kube-apiserver", ["--version"]).stdout
    assert kube.strip() == f"Kubernetes {PINS.tools['kube-apiserver'].version}"
    etcd = tools.run("etcd", ["--version"]).stdout
    assert f"etcd Version: {PINS.tools['etcd'].version.removeprefix('v')}" in etcd


def test_compile_asks_the_api_server_when_the_environment_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, need: Callable[..., None]
) -> None:
    """STANDBYC_APISERVER=on (the pre-commit hook's and the Argo CD plugin's switch) turns
    it on for compile; --no-apiserver turns it off again."""
    need("kubeconform", "promtool", "kube-apiserver", "etcd")
    monkeypatch.setenv("STANDBYC_APISERVER", "on")
    spec = REPO / "tests" / "cases" / "minimal" / "spec.yaml"
    run = run_cli("compile", str(spec), "--out", str(tmp_path / "out"))
    assert run.code == 0, run.err
    assert "  kube-apiserver: " in run.out and " objects dry-run at 1.35, 1.36, 1.37 " in run.out
    off = run_cli("compile", str(spec), "--out", str(tmp_path / "out2"), "--no-apiserver")
    assert off.code == 0, off.err
    assert "kube-apiserver" not in off.out


def _servers_of(where: Path) -> list[str]:
    """The processes running from ``where`` (a control plane's servers name it)."""
    found = subprocess.run(["pgrep", "-f", str(where)], capture_output=True, text=True, check=False)
    return found.stdout.split()


@pytest.mark.parametrize(
    ("stop", "code", "group", "when"),
    [
        (signal.SIGKILL, -9, False, "starting"),
        (signal.SIGTERM, 143, False, "starting"),
        (signal.SIGINT, 130, False, "starting"),
        (signal.SIGINT, 130, True, "starting"),
        (signal.SIGINT, 130, True, "judging"),
        (signal.SIGTERM, 143, False, "judging"),
    ],
    ids=["kill", "term", "interrupt", "ctrl-c-starting", "ctrl-c-judging", "term-judging"],
)
def test_a_stopped_validate_leaves_no_server_and_nothing_the_next_start_keeps(  # noqa: PLR0917
    tmp_path: Path,
    need: Callable[..., None],
    stop: signal.Signals,
    code: int,
    group: bool,
    when: str,
) -> None:
    """Killed, terminated or interrupted while its control plane starts or judges: the
    servers die with it at once, a stop it can answer (SIGTERM, SIGINT) removes its
    directory and says so with its exit code within seconds, and a kill's directory is
    removed by the next start. Ctrl-C reaches the whole process group, the servers
    included: the dry-run in flight must not wait on servers that went with it."""
    need("kubeconform", "promtool", "kube-apiserver", "etcd")
    temp = tmp_path / "tmp"
    temp.mkdir()
    proc = _stopped_at(temp, when)
    if group:
        os.killpg(proc.pid, stop)
    else:
        proc.send_signal(stop)
    stopped = time.monotonic()
    os.kill(proc.pid, signal.SIGCONT)  # it takes the stop now, its servers as they are
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == code, err.decode()
    assert time.monotonic() - stopped < 15  # the validators in flight finish first
    gone_by = time.monotonic() + 5
    while _servers_of(temp) and time.monotonic() < gone_by:
        time.sleep(0.1)
    assert _servers_of(temp) == []
    left = list(temp.glob("standbyc-controlplane-*"))
    if stop == signal.SIGKILL:
        assert len(left) == 1  # nothing ran on the way out
        assert remove_leftovers(temp) == left  # what the next start does first
    assert list(temp.glob("standbyc-controlplane-*")) == []


def _stopped_at(temp: Path, when: str) -> subprocess.Popen[bytes]:
    """validate --apiserver, frozen (SIGSTOP, standbyc alone) once its control plane is
    ``when`` (starting, judging): the dry-run of one spec can end between two looks, so a
    run that finished first is tried again."""
    reached = _apiserver_started if when == "starting" else _judging
    for _ in range(5):
        proc = subprocess.Popen(
            [sys.executable, "-m", "compiler", "validate", str(OUT / ENGINE), "--apiserver"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ,
            "TMPDIR": str(temp)}, cwd=REPO, start_new_session=True,
        )  # fmt: skip
        deadline = time.monotonic() + 180
        while proc.poll() is None and not reached(temp):
            assert time.monotonic() < deadline, f"the control plane never reached {when}"
            time.sleep(0.05)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGSTOP)
            if proc.poll() is None:
                return proc
        proc.communicate()
    pytest.fail(f"validate ended before it was seen {when}, five times")


def _apiserver_started(temp: Path) -> bool:
    return any("kube-apiserver" in _cmdline(pid) for pid in _servers_of(temp))


def _judging(temp: Path) -> bool:
    """The API server step has begun dry-running: the spec's namespace exists on the
    server (it is created before the first object), read with the control plane's own
    token."""
    for pid in _servers_of(temp):
        args = _cmdline(pid).split()
        if "--secure-port" not in args or "--token-auth-file" not in args:
            continue
        port = args[args.index("--secure-port") + 1]
        try:
            token = Path(args[args.index("--token-auth-file") + 1]).read_text().split(",")[0]
        except OSError:
            return False
        context = ssl.create_default_context()
        context.check_hostname, context.verify_mode = False, ssl.CERT_NONE
        conn = http.client.HTTPSConnection("127.0.0.1", int(port), context=context, timeout=2)
        try:
            conn.request("GET", "/api/v1/namespaces/inference-system",
                         headers={"Authorization": f"Bearer {token}"})  # fmt: skip
            return conn.getresponse().status == 200
        except OSError:
            return False
        finally:
            conn.close()
    return False


def _cmdline(pid: str) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""
