"""The Argo CD path: the plugin's commands run exactly as Argo CD runs them (the command
from deploy/argocd/plugin.yaml, a copy of the repository as the working directory, the
environment Argo CD sets), and what generate prints is the objects of the committed out/."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from compiler import kinds
from compiler.commands.argocd import generate_argv
from compiler.gate import pins as pinfile
from compiler.gate import schemas
from tests.conftest import OUT, REPO, run_cli

PLUGIN = yaml.safe_load((REPO / "deploy/argocd/plugin.yaml").read_text())
BIN = Path(sys.executable).parent  # where the console script standbyc is installed


def _own_code() -> dict[str, str]:
    """PYTHONPATH, when the tests run a checkout's code over an installed standbyc."""
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": path} if path else {}


def _run(command: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(cwd), **env}
    if tools := os.environ.get("STANDBYC_TOOLS_DIR"):
        environ["STANDBYC_TOOLS_DIR"] = tools
    if schemas := os.environ.get("STANDBYC_SCHEMA_DIR"):
        environ["STANDBYC_SCHEMA_DIR"] = schemas
    environ.update(_own_code())
    return subprocess.run(command, cwd=cwd, env=environ, capture_output=True, text=True,
                          timeout=300, check=False)  # fmt: skip


def make_checkout(tmp_path: Path) -> Path:
    """The repository as Argo CD's repo server has it."""
    repo = tmp_path / "repo"
    for part in ("specs", "deploy"):
        shutil.copytree(REPO / part, repo / part)
    (repo / "README.md").write_text("an inference GitOps repository\n")
    return repo


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    return make_checkout(tmp_path)


def _out_objects() -> list[dict[str, Any]]:
    """The committed out/'s applied objects, in the order its kustomizations list them,
    read independently of standbyc."""
    found: list[dict[str, Any]] = []

    def visit(directory: Path) -> None:
        for entry in yaml.safe_load((directory / "kustomization.yaml").read_text())["resources"]:
            path = directory / entry
            if path.is_dir():
                visit(path)
            else:
                found.append(yaml.safe_load(path.read_text()))

    visit(OUT)
    return found


def test_discover_finds_the_specs(checkout: Path) -> None:
    result = _run(PLUGIN["spec"]["discover"]["find"]["command"], checkout)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["specs/grpc-llm.yaml", "specs/inference-engine.yaml"]
    (checkout / "specs").rename(checkout / "elsewhere")
    shutil.rmtree(checkout / "elsewhere")
    assert _run(PLUGIN["spec"]["discover"]["find"]["command"], checkout).stdout == ""


def test_generate_prints_exactly_the_objects_of_out(checkout: Path) -> None:
    result = _run(
        PLUGIN["spec"]["generate"]["command"],
        checkout,
        ARGOCD_APP_NAME="standbyc",
        ARGOCD_APP_NAMESPACE="argocd",
        ARGOCD_APP_REVISION="0123abc",
        KUBE_VERSION="v1.35.2",
        PARAM_SPECS="specs",  # a plugin parameter, as Argo CD passes it
    )
    assert result.returncode == 0, result.stderr
    printed = list(yaml.safe_load_all(result.stdout))
    expected = _out_objects()
    key = lambda o: (o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])  # noqa: E731
    assert sorted(printed, key=key) == sorted(expected, key=key)
    kinds = [o["kind"] for o in printed]
    assert kinds[0] == "CustomResourceDefinition" and kinds[-1] == "Job"  # apply order
    assert "ConfigManagementPlugin" not in kinds and "Kustomization" not in kinds
    assert "standbyc: Argo CD app standbyc (namespace argocd)" in result.stderr
    assert "ok   kubernetes 1.35" in result.stderr  # the cluster's version, validated
    assert "kubernetes 1.36" not in result.stderr
    assert not (checkout / "out").exists()  # nothing written into the checkout


def test_a_1_28_cluster_gets_objects_1_28_accepts(checkout: Path) -> None:
    """Kubernetes 1.28 requires onPodConditions in every podFailurePolicy rule; 1.29 made
    it optional. For a destination Argo CD reports as 1.28 the refused-signature rule
    carries an empty list, and the same objects pass 1.37 too (a cluster upgraded later);
    for a current cluster the objects are exactly out/'s (the test above)."""
    result = _run(PLUGIN["spec"]["generate"]["command"], checkout, KUBE_VERSION="v1.28.15",
                  ARGOCD_APP_NAME="standbyc", PARAM_SPECS="specs")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "ok   kubernetes 1.28" in result.stderr
    objects = [o for o in yaml.safe_load_all(result.stdout) if o["kind"] in ("Job", "CronJob")]
    jobs = [o["spec"]["jobTemplate"]["spec"] if o["kind"] == "CronJob" else o["spec"]
            for o in objects]  # fmt: skip
    rules = [rule for job in jobs for rule in job.get("podFailurePolicy", {}).get("rules", [])]
    assert rules, "the grpc-llm spec verifies signatures: its Jobs fail on a refusal"
    assert all(rule["onPodConditions"] == [] and rule["onExitCodes"] for rule in rules)
    both = _run(PLUGIN["spec"]["generate"]["command"], checkout, PARAM_KUBE_VERSIONS="1.28,1.37",
                ARGOCD_APP_NAME="standbyc", PARAM_SPECS="specs")  # fmt: skip
    assert both.returncode == 0, both.stderr
    assert both.stdout == result.stdout
    assert "ok   kubernetes 1.28" in both.stderr and "ok   kubernetes 1.37" in both.stderr
    current = _run(PLUGIN["spec"]["generate"]["command"], checkout, KUBE_VERSION="v1.29.0",
                   ARGOCD_APP_NAME="standbyc", PARAM_SPECS="specs",
                   PARAM_VALIDATE="false")  # fmt: skip
    assert current.returncode == 0, current.stderr
    assert "onPodConditions" not in current.stdout


def test_a_broken_spec_fails_the_sync_with_its_location(checkout: Path) -> None:
    spec = checkout / "specs" / "inference-engine.yaml"
    spec.write_text(spec.read_text().replace("egress: 25Gbit/s", "egress: 25Gbps/s"))
    result = _run(PLUGIN["spec"]["generate"]["command"], checkout, ARGOCD_ENV_VALIDATE="false")
    assert result.returncode == 2
    assert result.stdout == ""
    assert "standbyc: specs/inference-engine.yaml:" in result.stderr
    assert "spec.tiers.hot.egress: cannot parse bandwidth '25Gbps/s'" in result.stderr


def test_the_deploy_manifests_name_the_plugin() -> None:
    apps = list(yaml.safe_load_all((REPO / "deploy/argocd/application.yaml").read_text()))
    appset = list(yaml.safe_load_all((REPO / "deploy/argocd/applicationset.yaml").read_text()))
    name = f"{PLUGIN['metadata']['name']}-{PLUGIN['spec']['version']}"
    assert apps[0]["spec"]["source"]["path"] == "out"
    assert apps[1]["spec"]["source"]["plugin"]["name"] == name
    params = {p["name"] for p in PLUGIN["spec"]["parameters"]["static"]}
    for app in (apps[1], *(a["spec"]["template"] for a in appset)):
        plugin = app["spec"]["source"]["plugin"]
        assert plugin["name"] == name
        assert {p["name"] for p in plugin["parameters"]} <= params
    patch = yaml.safe_load((REPO / "deploy/argocd/repo-server-patch.yaml").read_text())
    (container,) = patch["spec"]["template"]["spec"]["containers"]
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert "/home/argocd/cmp-server/config/plugin.yaml" in mounts
    assert container["securityContext"]["runAsUser"] == 999


def _param_env(plugin: dict[str, Any]) -> dict[str, str]:
    """What Argo CD sets for an Application's plugin parameters: PARAM_<NAME>, upper case,
    other characters as _ (argo-cd pkg/apis/application/v1alpha1/types.go, Environ)."""
    env = {}
    for p in plugin.get("parameters", []):
        name = re.sub(r"[^A-Z0-9_]", "_", p["name"].upper())
        if "string" in p:
            env[f"PARAM_{name}"] = p["string"]
        for i, item in enumerate(p.get("array", [])):
            env[f"PARAM_{name}_{i}"] = item
    return env


def _render(template: Any, values: dict[str, Any]) -> Any:
    """The ApplicationSet's Go templates, for the few forms they use."""
    if isinstance(template, dict):
        return {k: _render(v, values) for k, v in template.items()}
    if isinstance(template, list):
        return [_render(v, values) for v in template]
    if not isinstance(template, str):
        return template

    def one(match: re.Match[str]) -> str:
        expr = match.group(1).strip()
        field, _, pipe = expr.partition("|")
        value: Any = values
        for part in field.strip().lstrip(".").split("."):
            value = value[part]
        if pipe.strip().startswith("trimSuffix"):
            value = str(value).removesuffix(pipe.split('"')[1])
        return str(value)

    return re.sub(r"\{\{(.*?)\}\}", one, template)


def _selected(params: dict[str, Any], selector: dict[str, Any] | None) -> bool:
    """A generator's post selector as Argo CD applies it: matchLabels against the params'
    top-level string values only (applicationset/generators/generator_spec_processor.go,
    keepOnlyStringValues)."""
    strings = {k: v for k, v in params.items() if isinstance(v, str)}
    wanted = (selector or {}).get("matchLabels", {})
    return all(strings.get(k) == v for k, v in wanted.items())


def _applications(checkout: Path, cluster: str) -> list[dict[str, Any]]:
    """The Applications both ApplicationSets make for one cluster of their list, with the
    spec files of the checkout as the git generator finds them: with goTemplate, a file's
    own fields are its params, beside ``path``."""
    apps = []
    for appset in yaml.safe_load_all((REPO / "deploy/argocd/applicationset.yaml").read_text()):
        (generator,) = appset["spec"]["generators"]
        if "matrix" in generator:
            clusters, files = generator["matrix"]["generators"]
            pattern = files["git"]["files"][0]["path"]
            found = [
                {**(yaml.safe_load(f.read_text()) or {}),
                 "path": {"path": str(f.parent.relative_to(checkout)), "filename": f.name,
                          "filenameNormalized": f.name}}
                for f in sorted(checkout.glob(pattern))
            ]  # fmt: skip
            found = [f for f in found if _selected(f, files.get("selector"))]
            elements = [{**c, **f} for c in clusters["list"]["elements"] for f in found]
        else:
            elements = generator["list"]["elements"]
        apps += [_render(appset["spec"]["template"], e) for e in elements
                 if e["cluster"] == cluster]  # fmt: skip
    return apps


def test_each_cluster_wide_object_belongs_to_one_application(checkout: Path) -> None:
    """Two specs on one cluster through the ApplicationSets: every cluster-scoped object
    the plugin renders is in exactly one Application, and all objects of out/ are in one."""
    apps = _applications(checkout, "prod-eu")
    assert len(apps) == 3  # the cluster's own, and one per spec
    owner: dict[tuple[str, str, str], list[str]] = {}
    for app in apps:
        env = _param_env(app["spec"]["source"]["plugin"])
        result = _run(PLUGIN["spec"]["generate"]["command"], checkout, KUBE_VERSION="v1.36.0",
                      ARGOCD_APP_NAME=app["metadata"]["name"], ARGOCD_ENV_VALIDATE="false",
                      **env)  # fmt: skip
        assert result.returncode == 0, result.stderr
        for obj in yaml.safe_load_all(result.stdout):
            key = (obj["kind"], obj["metadata"].get("namespace", ""), obj["metadata"]["name"])
            owner.setdefault(key, []).append(app["metadata"]["name"])
    cluster_scoped = {k: v for k, v in owner.items() if not kinds.get(k[0]).namespaced}
    assert {k[0] for k in cluster_scoped} == {"CustomResourceDefinition", "ClusterPolicy"}
    assert all(len(v) == 1 for v in owner.values()), {k: v for k, v in owner.items()
                                                      if len(v) > 1}  # fmt: skip
    crd = next(k for k in cluster_scoped if k[0] == "CustomResourceDefinition")
    assert cluster_scoped[crd] == ["standbyc-prod-eu-cluster"]
    out = {(o["kind"], o["metadata"].get("namespace", ""), o["metadata"]["name"])
           for o in _out_objects()}  # fmt: skip
    assert set(owner) == out  # together, exactly what out/ applies


def test_parameters_win_over_env_and_arrays_are_joined() -> None:
    env = {"ARGOCD_ENV_SPECS": "old", "PARAM_SPECS_1": "b.yaml", "PARAM_SPECS_0": "a.yaml",
           "PARAM_VALIDATE": "false", "ARGOCD_ENV_STRICT": "true"}  # fmt: skip
    assert generate_argv(env) == ["compile", "a.yaml", "b.yaml", "--stdout", "--no-validate",
                                  "--strict", "--part", "all"]  # fmt: skip
    assert generate_argv({"PARAM_SPECS": "x", "ARGOCD_ENV_SPECS": "y"})[1] == "x"


def test_generate_help_lists_what_it_reads() -> None:
    result = run_cli("argocd", "generate", "--help")
    for name in ("SPECS", "KUBE_VERSIONS", "VALIDATE", "STRICT", "PART"):
        assert f"PARAM_{name} or ARGOCD_ENV_{name}" in result.out
    assert "KUBE_VERSION" in result.out


@pytest.fixture(scope="module")
def image_build(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The schema directory as the image's build stage makes it (`standbyc tools install`:
    every prebuilt version), under the strictest umask: what the build leaves is what the
    image gets, so nothing here widens a mode."""
    root = tmp_path_factory.mktemp("cmp-build") / "schemas"
    old = os.umask(0o077)
    try:
        schemas.build(root, pinfile.load().kube_prebuilt, allow_network=False)
    finally:
        os.umask(old)
    return root


def _docker_copy(src: Path, dest: Path) -> None:
    """`COPY --from=cmp-build SRC/ DEST/`: every file and folder with its mode bits as the
    build left them, owned by root (no --chown)."""
    shutil.copytree(src, dest, symlinks=True)  # copy2 and copystat: the modes, unchanged
    for path in [dest, *dest.rglob("*")]:
        os.lchown(path, 0, 0)


@pytest.fixture
def sidecar(image_build: Path) -> Iterator[dict[str, Any]]:
    """The plugin's sidecar as its image has it: user 999, the schemas copied in as the
    Dockerfile copies them (root's, the build's modes), HOME a writable emptyDir, a copy of
    the repository."""
    base = Path(tempfile.mkdtemp(prefix="standbyc-sidecar-"))
    base.chmod(0o755)
    schemas_ro = base / "opt" / "standbyc" / "schemas"
    schemas_ro.parent.mkdir(parents=True)
    (base / "opt").chmod(0o755)
    schemas_ro.parent.chmod(0o755)
    _docker_copy(image_build, schemas_ro)
    repo = base / "repo"
    for part in ("specs", "deploy"):
        shutil.copytree(REPO / part, repo / part)
    home = base / "home"
    home.mkdir()
    os.chown(home, 999, 999)
    subprocess.run(["chmod", "-R", "a-w,a+rX", str(repo)], check=True)  # Argo CD's checkout
    env = {"PATH": f"{BIN}:/usr/bin:/bin", "HOME": str(home), "TMPDIR": str(home),
           "STANDBYC_SCHEMA_DIR": str(schemas_ro),
           "STANDBYC_TOOLS_DIR": os.environ.get("STANDBYC_TOOLS_DIR", str(REPO / ".tools/bin")),
           "ARGOCD_APP_NAME": "standbyc-prod-eu-inference-engine", **_own_code()}  # fmt: skip
    yield {"repo": repo, "env": env, "schemas": schemas_ro}
    subprocess.run(["chmod", "-R", "u+w", str(base)], check=False)
    shutil.rmtree(base, ignore_errors=True)


def _as_sidecar(sidecar: dict[str, Any], **env: str) -> subprocess.CompletedProcess[str]:
    argv = ["setpriv", "--reuid", "999", "--regid", "999", "--clear-groups",
            *PLUGIN["spec"]["generate"]["command"]]  # fmt: skip
    return subprocess.run(argv, cwd=sidecar["repo"], env={**sidecar["env"], **env},
                          capture_output=True, text=True, timeout=600, check=False)  # fmt: skip


def test_the_sidecar_reads_the_schemas_its_image_carries(sidecar: dict[str, Any]) -> None:
    """As uid 999, over the tree exactly as the Dockerfile leaves it: every folder 0755 and
    file 0644 whatever the build's umask, and a prebuilt version validates."""
    tree = [sidecar["schemas"], *sidecar["schemas"].rglob("*")]
    assert {oct(p.stat().st_mode & 0o777) for p in tree if p.is_dir()} == {"0o755"}
    assert {oct(p.stat().st_mode & 0o777) for p in tree if p.is_file()} == {"0o644"}
    assert {(p.stat().st_uid, p.stat().st_gid) for p in tree} == {(0, 0)}
    result = _as_sidecar(sidecar, KUBE_VERSION="v1.35.2", PARAM_SPECS="specs")
    assert result.returncode == 0, result.stderr
    assert "ok   kubernetes 1.35" in result.stderr


def test_a_schema_folder_the_sidecar_cannot_read_is_exit_2(sidecar: dict[str, Any]) -> None:
    """A tree built before its modes were set (folders 0700, as mkdtemp makes them): a clear
    message naming what cannot be read and by whom, exit 2, not a traceback."""
    (sidecar["schemas"] / "kubernetes" / "v1.35.0").chmod(0o700)
    result = _as_sidecar(sidecar, KUBE_VERSION="v1.35.2", PARAM_SPECS="specs")
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    assert "permission denied to uid 999" in result.stderr
    assert "v1.35.0" in result.stderr, result.stderr


def test_the_sidecar_validates_a_version_its_image_lacks(sidecar: dict[str, Any]) -> None:
    """KUBE_VERSION 1.30 is not prebuilt and the schema directory is read-only: the plugin
    builds it into its writable cache and validates against it."""
    before = sorted(p.name for p in (sidecar["schemas"] / "kubernetes").iterdir())
    result = _as_sidecar(sidecar, KUBE_VERSION="v1.30.4", PARAM_SPECS="specs")
    assert result.returncode == 0, result.stderr
    assert "ok   kubernetes 1.30" in result.stderr
    assert sorted(p.name for p in (sidecar["schemas"] / "kubernetes").iterdir()) == before
    built = list(Path(sidecar["env"]["HOME"]).rglob("v1.30.0"))
    assert built, "the version was built into the sidecar's own cache"


def test_a_version_no_schema_package_ships_says_what_works_there(
    sidecar: dict[str, Any],
) -> None:
    result = _as_sidecar(sidecar, KUBE_VERSION="v1.38.0", PARAM_SPECS="specs")
    assert result.returncode == 2, result.stderr
    assert "no schemas for Kubernetes 1.38" in result.stderr
    assert "set the plugin parameter KUBE_VERSIONS (PARAM_KUBE_VERSIONS or " in result.stderr
    assert "ARGOCD_ENV_KUBE_VERSIONS) to versions the image carries: 1.32, " in result.stderr
    assert "make schemas" not in result.stderr


@pytest.mark.parametrize("pushgateway", ["null", '"http://pushgateway.monitoring.svc:9091"'])
@pytest.mark.parametrize(
    "trigger", ["{type: argocdHook}", "{type: schedule, schedule: '0 * * * *'}"]
)
def test_a_generation_bump_changes_an_object_argo_cd_compares(
    tmp_path: Path, pushgateway: str, trigger: str
) -> None:
    """Argo CD leaves hooks out of the sync status: some other object must change with
    model.generation, or automated sync never runs, in every mode."""
    compared = []
    for generation in (42, 43):
        spec = tmp_path / f"g{generation}" / "spec.yaml"
        spec.parent.mkdir()
        spec.write_text(
            "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\n"
            "metadata: {name: engine, namespace: serving}\n"
            f"spec:\n  model: {{generation: {generation}}}\n"
            f"  weightSync:\n    trigger: {trigger}\n    report: {{pushgateway: {pushgateway}}}\n"
        )
        result = run_cli("compile", str(spec), "--stdout", "--no-validate")
        assert result.code == 0, result.err
        hook = "argocd.argoproj.io/hook"
        objects = [o for o in yaml.safe_load_all(result.out)
                   if hook not in o["metadata"].get("annotations", {})]  # fmt: skip
        compared.append(objects)
    assert compared[0] != compared[1]
    changed = [a["kind"] for a, b in zip(compared[0], compared[1], strict=True) if a != b]
    assert "ServiceAccount" in changed


def test_the_log_line_leaves_out_what_argo_cd_left_empty(checkout: Path) -> None:
    result = _run(PLUGIN["spec"]["generate"]["command"], checkout, ARGOCD_APP_NAME="app",
                  ARGOCD_APP_NAMESPACE="", ARGOCD_ENV_VALIDATE="false")  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "standbyc: Argo CD app app: standbyc compile" in result.stderr
    assert "(namespace )" not in result.stderr
