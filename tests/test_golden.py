"""Golden trees: each tests/cases/<scenario>/spec.yaml compiles to expected/, and the
example specs compile to the committed out/ (test_committed_out_is_fresh)."""

from __future__ import annotations

import difflib
import shutil
from pathlib import Path

import pytest

from compiler.render.base import packaged_templates
from compiler.validation import run_gate
from tests.conftest import CASES, OUT, REPO, golden_trees, golden_versions, run_cli, tree

SCENARIOS = sorted(p.name for p in CASES.iterdir() if (p / "spec.yaml").is_file())


def _compile(case: Path, out: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Headers name the spec relative to out/'s parent: "spec.yaml", wherever the repo is.
    shutil.copy(case / "spec.yaml", out.parent / "spec.yaml")
    monkeypatch.chdir(out.parent)
    result = run_cli("compile", "spec.yaml", "--out", str(out), "--no-validate")
    assert result.code == 0, result.err


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_golden(
    scenario: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    case = CASES / scenario
    out = tmp_path / "out"
    _compile(case, out, monkeypatch)
    expected_dir = case / "expected"
    if request.config.getoption("--update-golden"):
        shutil.rmtree(expected_dir, ignore_errors=True)
        shutil.copytree(out, expected_dir)
        return
    got, want = tree(out), tree(expected_dir)
    diffs: list[str] = []
    for rel in sorted(set(got) | set(want)):
        if got.get(rel) != want.get(rel):
            diffs.extend(
                difflib.unified_diff(
                    want.get(rel, b"").decode().splitlines(keepends=True),
                    got.get(rel, b"").decode().splitlines(keepends=True),
                    fromfile=f"expected/{rel}",
                    tofile=f"got/{rel}",
                )
            )
    assert not diffs, "output differs from golden files (pytest --update-golden):\n" + "".join(
        diffs
    )


@pytest.mark.parametrize("where", ["root", "specs", "subdir", "/"])
def test_output_is_the_same_from_any_directory(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Compile and check from the project root, its specs/, a subdirectory and /: the same
    bytes, equal to the committed out/ (headers name specs relative to out/'s parent)."""
    project = tmp_path / "project"
    shutil.copytree(REPO / "specs", project / "specs")
    (project / "docs" / "deep").mkdir(parents=True)
    cwd = {"root": project, "specs": project / "specs", "subdir": project / "docs" / "deep",
           "/": Path("/")}[where]  # fmt: skip
    monkeypatch.chdir(cwd)
    specs, out = str(project / "specs"), str(project / "out")
    result = run_cli("compile", specs, "--out", out, "--no-validate")
    assert result.code == 0, result.err
    assert tree(project / "out") == tree(OUT)
    for other in (project, project / "specs", Path("/")):
        monkeypatch.chdir(other)
        checked = run_cli("check", specs, "--out", out)
        assert checked.code == 0, checked.out + checked.err


@pytest.mark.parametrize("root", sorted({str(t) for _, t in golden_trees()}))
def test_golden_tree_passes_the_validation_gate(root: str) -> None:
    versions = golden_versions(Path(root))
    report = run_gate(Path(root), kube_versions=versions, display_root="expected")
    assert report.ok, report.summary_text()
    assert report.rule_tests and all(t.ok for t in report.rule_tests)
    assert not [f for f in report.findings if f.severity == "warning"], report.summary_text()


def test_bits_bytes_slip_in_a_threshold_fails_the_generated_tests(tmp_path: Path) -> None:
    """Drop the x 8 (compare bytes/s with bit/s): the generated promtool tests must catch it."""
    tree = tmp_path / "out"
    shutil.copytree(OUT, tree)
    rule_dir = tree / "inference-system" / "inference-engine"
    changed = []
    for path in [*rule_dir.glob("prometheusrule-*.yaml"), *rule_dir.glob("tests/*.rules.yaml")]:
        text = path.read_text()
        if ") * 8 > 21250000000" in text:  # the hot tier's threshold, 85 % of 25 Gbit/s
            path.write_text(text.replace(") * 8 > 21250000000", ") > 21250000000"))
            changed.append(path.name)
    # the deployed rule and the copy its tests load
    assert sorted(changed) == [
        "inference-bandwidth-high.rules.yaml",
        "prometheusrule-inference-engine-failover.yaml",
    ]
    report = run_gate(tree, display_root="out")
    assert not report.ok
    failed = sorted(t.file for t in report.rule_tests if not t.ok)
    assert failed == [
        "out/inference-system/inference-engine/tests/inference-bandwidth-high.test.yaml"
    ]


def test_compile_that_fails_validation_leaves_out_unchanged(workdir: Path, tmp_path: Path) -> None:
    assert run_cli("compile").code == 0
    before = tree(workdir / "out")
    overrides = tmp_path / "templates"
    overrides.mkdir()
    sa = (packaged_templates() / "serviceaccount.yaml.j2").read_text()
    (overrides / "serviceaccount.yaml.j2").write_text(
        sa.replace("automountServiceAccountToken: false", "automountServiceAccountToken: nope")
    )
    # a spec's warnings are still said when validation fails
    (workdir / "specs" / "extra.yaml").write_text(
        "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\nmetadata:\n  name: extra\n"
    )
    result = run_cli("compile", "--templates", str(overrides))
    assert result.code == 1
    assert "specs/extra.yaml:4:3: metadata: metadata.namespace is not set" in result.err
    assert (
        "out/inference-system/inference-engine/serviceaccount-inference-engine-weight-sync.yaml: "
        "ServiceAccount/inference-engine-weight-sync: /automountServiceAccountToken: "
    ) in result.err
    assert "out/ was left unchanged" in result.err
    assert tree(workdir / "out") == before


def test_committed_out_is_fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """The repository's own out/ is what its specs compile to (what CI and Argo CD see)."""
    monkeypatch.chdir(CASES.parent.parent)
    result = run_cli("check")
    assert result.code == 0, result.out + result.err
