"""The Jobs' image (Dockerfile) and the compiled Jobs agree: user, entrypoint, writable
paths, and the packages `standbyc weights sync` needs. No Docker engine runs here, so
the Dockerfile is read, and sync is run with the compiler's own dependencies blocked."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from collections.abc import Iterable
from importlib import metadata
from pathlib import Path

import yaml
from packaging.utils import canonicalize_name

from compiler.spec import SYNC_IMAGE
from tests.conftest import REPO
from tests.sync.conftest import Nginx, job_command, job_container, publish, sha256, with_arg
from tests.sync.image import LISTED, STAGES, closure
from tests.sync.signing import Keys

FINAL = STAGES["sync"]
# Installed by pyproject.toml for the compiler, never imported by `weights sync`.
COMPILER_ONLY = ("jinja2", "ruamel", "jsonschema", "kubernetes_validate", "yaml")


def _instruction(name: str) -> str:
    found = re.findall(rf"^{name} (.+)$", FINAL, re.MULTILINE)
    assert len(found) == 1, (name, found)
    return str(found[0])


def _job_pod(compiled: Path) -> dict[str, object]:
    path = compiled / "inference-system/inference-engine/job-inference-engine-weight-sync-hot.yaml"
    pod: dict[str, object] = yaml.safe_load(path.read_text())["spec"]["template"]["spec"]
    return pod


def test_user_entrypoint_and_writable_paths_agree(compiled: Path) -> None:
    pod = _job_pod(compiled)
    container = job_container(compiled, "hot")
    ctx = pod["securityContext"]
    assert isinstance(ctx, dict)
    assert _instruction("USER") == f"{ctx['runAsUser']}:{ctx['runAsGroup']}" == "65532:65532"
    assert json.loads(_instruction("ENTRYPOINT")) == container["command"] == ["standbyc"]
    # A read-only root: the only writable places are the mounted volumes.
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    mounts = {m["mountPath"] for m in container["volumeMounts"]}
    assert _instruction("WORKDIR") in mounts  # /tmp, an emptyDir
    env = dict(re.findall(r"(\w+)=(\S+)", _instruction("ENV")))
    assert env["HOME"] in mounts
    target = container["args"][container["args"].index("--target") + 1]
    assert any(target.startswith(m + "/") for m in mounts)  # sync writes beside its target


def test_the_jobs_image_is_the_default_target() -> None:
    assert list(STAGES)[-1] == "sync"  # docker build . builds the last stage


def test_default_image_is_the_one_the_dockerfile_builds() -> None:
    version = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["version"]
    assert f"standbyc:{version}" == SYNC_IMAGE
    assert "standbyc:$(VERSION)" in (REPO / "Makefile").read_text()


def test_the_image_packages_are_what_sync_imports(
    nginx: Nginx, generations: dict[int, Path], compiled: Path, tmp_path: Path
) -> None:
    """Run the Job's command with the compiler-only packages blocked, from an empty working
    directory: it syncs, and writes nothing but beside its target and in TMPDIR."""
    listed = sorted(LISTED)
    assert listed == ["botocore", "model-signing", "numpy", "prometheus-client", "pyopenssl",
                      "rich", "xxhash", "zstandard"]  # fmt: skip
    publish(generations[1], nginx.root, 42)
    weights = tmp_path / "weights"
    cmd = job_command(compiled, "hot", source=nginx.url, weights=weights)
    proc, cwd = _run_blocked(cmd, COMPILER_ONLY, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert sha256(weights / "hot/llama-7b/model.safetensors") == sha256(generations[1])
    assert not list(cwd.iterdir())
    written = {p.relative_to(weights).parts[0] for p in weights.rglob("*")}
    assert written == {"hot"}


def _run_blocked(
    cmd: list[str], blocked: Iterable[str], tmp_path: Path
) -> tuple[subprocess.CompletedProcess[str], Path]:
    """Run a standbyc command with the top-level modules ``blocked`` unimportable, from an
    empty working directory; the process, and that directory."""
    cwd, tmp = tmp_path / "cwd", tmp_path / "tmp"
    cwd.mkdir()
    tmp.mkdir()
    blocker = (
        "import importlib.abc, runpy, sys\n"
        f"BLOCKED = {tuple(sorted(blocked))!r}\n"
        "class Block(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path, target=None):\n"
        "        if name.split('.')[0] in BLOCKED:\n"
        "            raise ImportError('not in the sync image: ' + name)\n"
        "sys.meta_path.insert(0, Block())\n"
        "sys.argv = ['standbyc', *sys.argv[1:]]\n"
        "from compiler.cli import main\n"
        "sys.exit(main())\n"
    )
    proc = subprocess.run(
        [sys.executable, "-c", blocker, *cmd[1:]],
        cwd=cwd, env={"TMPDIR": str(tmp), "PATH": "/usr/bin:/bin", "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return proc, cwd


def _outside(closure: set[str]) -> set[str]:
    """Top-level modules of the installed distributions the image does not hold."""
    return {
        top
        for top, dists in metadata.packages_distributions().items()
        if top != "compiler" and not {canonicalize_name(d) for d in dists} & closure
    }


def test_the_image_holds_what_verification_imports(
    nginx: Nginx, signed: dict[int, Path], keys: Keys, compiled: Path, tmp_path: Path
) -> None:
    """A signed sync (weightSync.verify, the key from its mount) with every module the
    image's packages do not bring blocked: it verifies and swaps in. model-signing does not
    declare pyOpenSSL; without the Dockerfile's own pyopenssl the image would lack it."""
    image = closure(LISTED)
    assert "pyopenssl" in image and "pyopenssl" not in closure(LISTED - {"pyopenssl"})
    assert {"sigstore", "cryptography", "blake3"} <= image
    publish(signed[2], nginx.root, 2)
    weights = tmp_path / "weights"
    cmd = job_command(compiled, "hot", source=nginx.url, weights=weights)
    trust = ["--verify", "key", "--verify-trust", str(keys.publisher.with_suffix(".pub"))]
    blocked = _outside(image)
    assert {"OpenSSL", "jinja2", "torch"} & blocked == {"jinja2", "torch"}
    proc, _ = _run_blocked(with_arg(cmd, "--generation", "2") + trust, blocked, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(proc.stdout)["verified"]["generation"] == 2
    assert (weights / "hot/llama-7b/model.sig").is_file()


def test_the_build_context_leaves_out_the_virtualenv_and_keeps_what_is_copied() -> None:
    """`COPY . .` sends the whole context: never the virtualenv (about 5 GB with torch) or
    the built tools and caches, always what the Dockerfile copies by name."""
    ignored = {
        line.strip().rstrip("/")
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    }
    assert {".venv", ".tools", ".cache", ".git"} <= ignored
    copied = {"pyproject.toml", "README.md", "constraints.txt", "compiler", "templates", "scripts"}
    assert not copied & ignored
    dockerfile = (REPO / "Dockerfile").read_text()
    assert all(name in dockerfile or name == "scripts" for name in copied)
