"""standbyc outside its own repository: the wheel installed in a fresh environment, run from
an unrelated directory with an empty home. Its hints work from there, `standbyc tools
install` builds the validators, and compile then validates."""

from __future__ import annotations

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from tests.conftest import REPO


def _go_env() -> dict[str, str]:
    """Go's caches as they are (a fresh home would rebuild Prometheus from scratch)."""
    out = subprocess.run(["go", "env", "GOCACHE", "GOMODCACHE", "GOPATH"], capture_output=True,
                         text=True, check=True).stdout.split()  # fmt: skip
    return dict(zip(("GOCACHE", "GOMODCACHE", "GOPATH"), out, strict=True))


@pytest.fixture(scope="module")
def wheel_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    base = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation",
         "-w", str(base / "dist"), str(REPO)], check=True,
    )  # fmt: skip
    venv = base / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    (wheel,) = (base / "dist").glob("standbyc-*.whl")
    subprocess.run([str(python), "-m", "pip", "install", "-q", "--no-deps", str(wheel)],
                   check=True)  # fmt: skip
    # The dependencies from this test environment, without its editable standbyc: a .pth
    # adds the directory, and .pth files in it (the editable finder) are not processed.
    code = "import sysconfig; print(sysconfig.get_paths()['purelib'])"
    site = subprocess.run([str(python), "-c", code], capture_output=True, text=True,
                          check=True).stdout  # fmt: skip
    Path(site.strip(), "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    home = base / "home"
    project = base / "gitops"
    shutil.copytree(REPO / "specs", project / "specs")
    env = {"PATH": f"{venv / 'bin'}:/usr/local/go/bin:/usr/bin:/bin", "HOME": str(home),
           **_go_env()}  # fmt: skip
    return {"env": env, "project": project, "home": home, "bin": venv / "bin" / "standbyc",
            "wheel": wheel}  # fmt: skip


def _run(
    wheel_env: dict[str, object], *args: str, **extra: str
) -> subprocess.CompletedProcess[str]:
    env = {**wheel_env["env"], **extra}  # type: ignore[dict-item]
    return subprocess.run([str(wheel_env["bin"]), *args], cwd=wheel_env["project"], env=env,
                          capture_output=True, text=True, timeout=1200, check=False)  # fmt: skip


def test_the_wheel_holds_the_package_and_no_test_helpers(wheel_env: dict[str, object]) -> None:
    with zipfile.ZipFile(str(wheel_env["wheel"])) as wheel:
        names = set(wheel.namelist())
    assert {"compiler/reuse/identity.py", "compiler/templates/configmap-grpc.yaml.j2"} <= names
    assert "compiler/weights/testing.py" not in names


def test_the_wheel_runs_from_itself(wheel_env: dict[str, object]) -> None:
    result = _run(wheel_env, "schema")
    assert result.returncode == 0, result.stderr
    where = subprocess.run(
        [str(Path(str(wheel_env["bin"])).with_name("python")), "-c",
         "import compiler; print(compiler.__file__)"], capture_output=True, text=True,
        check=True, env=wheel_env["env"], cwd=wheel_env["project"],  # type: ignore[arg-type]
    ).stdout  # fmt: skip
    assert "site-packages" in where and str(REPO) not in where


def test_a_missing_validator_names_a_command_that_works_from_a_wheel(
    wheel_env: dict[str, object],
) -> None:
    result = _run(wheel_env, "compile")
    assert result.returncode == 2
    home = wheel_env["home"]
    assert result.stderr == (
        "standbyc: kubeconform is not installed; install it with: standbyc tools install  "
        f"(builds the pinned validators with Go, into {home}/.cache/standbyc/bin); or skip "
        "validation with: standbyc compile --no-validate\n"
    )
    assert _run(wheel_env, "compile", "--no-validate").returncode == 0


def test_schemas_build_without_go_says_what_is_missing(
    wheel_env: dict[str, object], tmp_path: Path
) -> None:
    schema_dir = tmp_path / "cache" / "schemas"
    result = _run(wheel_env, "schemas", "build", "--schema-dir", str(schema_dir),
                  PATH=str(Path(str(wheel_env["bin"])).parent))  # fmt: skip
    assert result.returncode == 2
    assert "the go command is missing" in result.stderr
    assert "Install Go >= 1.24" in result.stderr
    assert not list((tmp_path / "cache").glob(".*"))  # no temp directory left behind


def test_tools_install_then_compile_validates(wheel_env: dict[str, object]) -> None:
    result = _run(wheel_env, "tools", "install")
    assert result.returncode == 0, result.stderr
    installed = Path(str(wheel_env["home"])) / ".cache" / "standbyc" / "bin"
    assert {p.name for p in installed.iterdir()} >= {"kubeconform", "promtool"}
    compiled = _run(wheel_env, "compile")
    assert compiled.returncode == 0, compiled.stderr
    assert "PASSED: 0 errors" in compiled.stdout
    again = _run(wheel_env, "tools", "install")
    assert "kubeconform v0.7.0 already installed" in again.stderr
    assert (Path(str(wheel_env["project"])) / "out" / "kustomization.yaml").is_file()
