"""The pre-commit hooks, for real: ``pre-commit run`` in a consumer repository whose
``.pre-commit-config.yaml`` names a snapshot of this working tree.

pre-commit pip-installs standbyc from that snapshot (so the test needs PyPI for standbyc's
dependencies, as any consumer does) and runs the hook in the consumer, which holds an
``out/`` tree. The tests of this module share one snapshot at one commit and one
PRE_COMMIT_HOME, so pre-commit installs the hooks' environment once, as it does for a
user (``try-repo`` would install it again for every run). The validators come from
``make tools``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from compiler.gate import DEFAULT_KUBE_VERSIONS

FIXTURES = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[2]


def _git(cwd: Path, *args: str) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@example.invalid",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@example.invalid",
    }
    proc = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return proc.stdout


def _snapshot_hook_repo(dest: Path) -> Path:
    """This working tree (tracked and untracked, not ignored files) as a one-commit repo."""
    listed = _git(REPO, "ls-files", "--cached", "--others", "--exclude-standard", "-z")
    for rel in filter(None, listed.split("\0")):
        src = REPO / rel
        if src.is_file():
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    _git(dest, "init", "-q", "-b", "main")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-qm", "snapshot")
    return dest


def _consumer(dest: Path, tree: Path) -> Path:
    shutil.copytree(tree, dest / "out")
    _git(dest, "init", "-q", "-b", "main")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-qm", "out")
    return dest


@dataclass(frozen=True)
class HookRepo:
    path: Path
    rev: str
    home: Path  # PRE_COMMIT_HOME: where pre-commit keeps the hooks' environment


def _run_hook(
    hooks: HookRepo, consumer: Path, hook: str, schema_dir: Path, *flags: str
) -> subprocess.CompletedProcess[str]:
    """``pre-commit run`` of ``hook`` over every file (``flags``: default ``--verbose``)."""
    pre_commit = Path(sys.executable).with_name("pre-commit")
    if not pre_commit.exists():
        pytest.fail("pre-commit is not installed in this venv: pip install -e '.[dev]'")
    config = (
        f"repos:\n  - repo: {hooks.path}\n    rev: {hooks.rev}\n    hooks:\n      - id: {hook}\n"
    )
    (consumer / ".pre-commit-config.yaml").write_text(config)
    _git(consumer, "add", ".pre-commit-config.yaml")  # pre-commit refuses an unstaged config
    env = {
        **os.environ,
        "PRE_COMMIT_HOME": str(hooks.home),
        # The hook's venv is not this checkout: point it at the tools and schemas of `make tools`.
        "STANDBYC_TOOLS_DIR": str(REPO / ".tools" / "bin"),
        "STANDBYC_SCHEMA_DIR": str(schema_dir),
    }
    return subprocess.run(
        [str(pre_commit), "run", hook, "--all-files", *(flags or ("--verbose",))],
        cwd=consumer,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        check=False,
    )


@pytest.fixture(scope="module")
def hook_repo(tmp_path_factory: pytest.TempPathFactory) -> HookRepo:
    # As the repository is cloned: a branch, and no release tag to pin to.
    path = _snapshot_hook_repo(tmp_path_factory.mktemp("hookrepo"))
    rev = _git(path, "rev-parse", "HEAD").strip()
    return HookRepo(path, rev, tmp_path_factory.mktemp("pre-commit-home"))


def test_validate_hook_passes_on_a_valid_tree(
    hook_repo: HookRepo, tmp_path: Path, validators: Path
) -> None:
    proc = _run_hook(
        hook_repo, _consumer(tmp_path, FIXTURES / "good"), "standbyc-validate", validators
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "standbyc validate" in proc.stdout and "Passed" in proc.stdout
    assert f"kubernetes {DEFAULT_KUBE_VERSIONS[-1]}" in proc.stdout


def test_validate_hook_fails_on_a_broken_tree(
    hook_repo: HookRepo, tmp_path: Path, validators: Path
) -> None:
    proc = _run_hook(
        hook_repo,
        _consumer(tmp_path, FIXTURES / "broken" / "wrong-type"),
        "standbyc-validate",
        validators,
    )
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "Failed" in proc.stdout
    assert (
        "out/inference-system/seed/deployment-llm-hot.yaml: Deployment/llm-hot: /spec/replicas: "
        "got string, want null or integer"
    ) in proc.stdout


def test_check_hook_passes_when_fresh_and_fails_when_stale(
    hook_repo: HookRepo, tmp_path: Path, validators: Path
) -> None:
    consumer = tmp_path / "consumer"
    consumer.mkdir()
    shutil.copytree(REPO / "specs", consumer / "specs")
    compiled = subprocess.run(
        [sys.executable, "-m", "compiler", "compile", "--no-validate"],
        cwd=consumer,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert compiled.returncode == 0, compiled.stderr
    _git(consumer, "init", "-q", "-b", "main")
    _git(consumer, "add", "-A")
    _git(consumer, "commit", "-qm", "specs and out")
    fresh = _run_hook(hook_repo, consumer, "standbyc-check", validators)
    assert fresh.returncode == 0, fresh.stdout + fresh.stderr
    assert "Passed" in fresh.stdout

    spec = consumer / "specs" / "inference-engine.yaml"
    spec.write_text(spec.read_text().replace("egress: 25Gbit/s", "egress: 20Gbit/s"))
    _git(consumer, "add", "-A")
    stale = _run_hook(hook_repo, consumer, "standbyc-check", validators)
    assert stale.returncode == 1, stale.stdout + stale.stderr
    assert "Failed" in stale.stdout
    assert "+      bandwidth: 20G" in stale.stdout
    assert "out/ is stale" in stale.stdout


def test_check_hook_says_a_missed_objective_at_every_commit(
    hook_repo: HookRepo, tmp_path: Path, validators: Path
) -> None:
    """A missed objective is a warning, and the hook passes: pre-commit shows a passing
    hook's output only when the hook is verbose, so the hook says it is."""
    consumer = tmp_path / "consumer"
    consumer.mkdir()
    shutil.copytree(REPO / "specs", consumer / "specs")
    spec = consumer / "specs" / "inference-engine.yaml"
    spec.write_text(spec.read_text().replace("    rto: 2m\n", "    rto: 1s\n"))
    compiled = subprocess.run(
        [sys.executable, "-m", "compiler", "compile", "--no-validate"],
        cwd=consumer, env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert compiled.returncode == 0, compiled.stderr
    _git(consumer, "init", "-q", "-b", "main")
    _git(consumer, "add", "-A")
    _git(consumer, "commit", "-qm", "specs and out")
    run = _run_hook(hook_repo, consumer, "standbyc-check", validators, "--color=never")
    assert run.returncode == 0, run.stdout + run.stderr
    assert "Passed" in run.stdout
    assert "objective missed: node loss serves again after" in run.stdout
    assert "PLAN.md beside each spec's objects shows the timelines" in run.stdout


def test_the_readme_snippet_works_from_a_separate_repository(
    hook_repo: HookRepo, tmp_path: Path, validators: Path
) -> None:
    """The README's .pre-commit-config.yaml, as written (only the repository's address is
    this snapshot, which has no tags), in a GitOps repository of its own: `pre-commit run
    --all-files`; then pinned as the README says, and run again."""
    readme = (REPO / "README.md").read_text()
    snippet = readme.split("# .pre-commit-config.yaml\n", 1)[1].split("```", 1)[0]
    assert not _git(hook_repo.path, "tag", "--list").strip()
    consumer = tmp_path / "gitops"
    shutil.copytree(REPO / "specs", consumer / "specs")
    shutil.copytree(REPO / "out", consumer / "out")
    url = snippet.split("repo: ", 1)[1].split()[0]
    config = consumer / ".pre-commit-config.yaml"
    config.write_text(snippet.replace(url, str(hook_repo.path)))
    _git(consumer, "init", "-q", "-b", "main")
    _git(consumer, "add", "-A")
    _git(consumer, "commit", "-qm", "specs and out")
    pre_commit = Path(sys.executable).with_name("pre-commit")
    env = {**os.environ, "PRE_COMMIT_HOME": str(hook_repo.home),
           "STANDBYC_TOOLS_DIR": str(REPO / ".tools" / "bin"),
           "STANDBYC_SCHEMA_DIR": str(validators)}  # fmt: skip

    def pre_commit_run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(pre_commit), *args], cwd=consumer, env=env,
                              capture_output=True, text=True, timeout=900, check=False)  # fmt: skip

    proc = pre_commit_run("run", "--all-files")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("Passed") == 2
    # The README's pin: the branch's commit, frozen into the config.
    pin = readme.split("pin it with `", 1)[1].split("`", 1)[0].split()
    assert pin[:2] == ["pre-commit", "autoupdate"]
    proc = pre_commit_run(*pin[1:])
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"rev: {hook_repo.rev}" in config.read_text()
    _git(consumer, "add", "-A")
    proc = pre_commit_run("run", "--all-files")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("Passed") == 2
