"""out/ is written atomically, owned by header, and `check` catches staleness."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler import fsutil, outdir, pipeline
from compiler.errors import ValidationFailed
from compiler.render.base import Renderer
from tests.conftest import run_cli, tree


def _compile(*extra: str) -> None:
    result = run_cli("compile", "--no-validate", *extra)
    assert result.code == 0, result.err


def test_failed_compile_leaves_out_unchanged(workdir: Path) -> None:
    _compile()
    (workdir / "out" / "NOTES.md").write_text("my notes\n")
    before = tree(workdir / "out")
    spec = workdir / "specs" / "inference-engine.yaml"
    spec.write_text(spec.read_text().replace("egress: 25Gbit/s", "egress: 25Gbps/s"))
    result = run_cli("compile", "--no-validate")
    assert result.code == 2
    assert tree(workdir / "out") == before
    assert sorted(p.name for p in workdir.iterdir()) == ["out", "specs"]


def test_failed_validation_leaves_out_unchanged(workdir: Path) -> None:
    _compile()
    before = tree(workdir / "out")
    spec = workdir / "specs" / "inference-engine.yaml"
    spec.write_text(spec.read_text().replace("replicas: 3", "replicas: 2"))
    desired = run_cli("check").out
    assert desired  # the spec change does change out/

    def reject(staged: Path) -> None:
        assert (staged / "kustomization.yaml").is_file()
        raise ValidationFailed("rejected by test")

    specs = pipeline.discover([workdir / "specs"])

    def build(current: outdir.Contents) -> dict[str, str]:
        return pipeline.build_tree(specs, Renderer(), current.owned, workdir)[1]

    with pytest.raises(ValidationFailed):
        outdir.replace(workdir / "out", build, validate=reject)
    assert tree(workdir / "out") == before


def test_broken_template_leaves_out_unchanged(workdir: Path) -> None:
    _compile()
    before = tree(workdir / "out")
    overrides = workdir / "my-templates"
    overrides.mkdir()
    (overrides / "serviceaccount.yaml.j2").write_text("kind: {{ undefined_thing | q }}\n")
    result = run_cli("compile", "--no-validate", "--templates", str(overrides))
    assert result.code == 2
    assert result.err.startswith("standbyc: serviceaccount.yaml.j2:1: ")
    assert "undefined_thing" in result.err
    assert tree(workdir / "out") == before


def test_template_that_renders_the_wrong_object_is_refused(workdir: Path) -> None:
    overrides = workdir / "my-templates"
    overrides.mkdir()
    (overrides / "serviceaccount.yaml.j2").write_text(
        "apiVersion: v1\nkind: Secret\nmetadata:\n  name: {{ name | q }}\n"
    )
    result = run_cli("compile", "--no-validate", "--templates", str(overrides))
    assert result.code == 2
    assert "serviceaccount.yaml.j2: rendered apiVersion/kind/name/namespace" in result.err
    assert not (workdir / "out").exists()


def test_foreign_files_survive_and_stale_owned_files_go(workdir: Path) -> None:
    _compile()
    out = workdir / "out"
    (out / "README.md").write_text("hand-written\n")
    (workdir / "specs" / "grpc-llm.yaml").unlink()
    _compile()
    assert (out / "README.md").read_text() == "hand-written\n"
    assert not (out / "llm-serving").exists()
    assert (out / "inference-system" / "inference-engine" / "kustomization.yaml").is_file()


def test_compiling_one_spec_keeps_the_others(workdir: Path) -> None:
    _compile()
    before = tree(workdir / "out")
    _compile("specs/inference-engine.yaml")
    assert tree(workdir / "out") == before


def test_refuses_to_overwrite_a_foreign_file(workdir: Path) -> None:
    _compile()
    target = workdir / "out" / "inference-system" / "inference-engine" / "kustomization.yaml"
    target.write_text("# mine\n")
    result = run_cli("compile", "--no-validate")
    assert result.code == 2
    assert (
        "refusing to overwrite out/inference-system/inference-engine/kustomization.yaml"
        in result.err
    )
    assert target.read_text() == "# mine\n"


def test_interrupted_swap_is_recovered(workdir: Path) -> None:
    _compile()
    before = tree(workdir / "out")
    (workdir / "out").rename(workdir / ".out.standbyc-old")  # crash between the two renames
    _compile()
    assert tree(workdir / "out") == before
    assert not (workdir / ".out.standbyc-old").exists()


def test_check_is_clean_after_compile(workdir: Path) -> None:
    _compile()
    result = run_cli("check")
    assert result.code == 0
    assert result.out == "out/ is up to date\n"


def test_check_reports_stale_output_with_a_diff(workdir: Path) -> None:
    _compile()
    spec = workdir / "specs" / "inference-engine.yaml"
    spec.write_text(spec.read_text().replace("egress: 25Gbit/s", "egress: 20Gbit/s"))
    result = run_cli("check")
    assert result.code == 1
    assert "-      bandwidth: 25G\n+      bandwidth: 20G\n" in result.out
    assert (
        "--- out/inference-system/inference-engine/ciliumegressqos-inference-engine-qos.yaml"
        in (result.out)
    )
    assert "out/ is stale" in result.err


def test_check_notices_a_hand_edit_and_a_missing_file(workdir: Path) -> None:
    _compile()
    sa = (
        workdir
        / "out/inference-system/inference-engine/serviceaccount-inference-engine-weight-sync.yaml"
    )
    sa.unlink()
    result = run_cli("check", "--format", "json")
    assert result.code == 1
    assert '"fresh": false' in result.out
    assert "serviceaccount-inference-engine-weight-sync.yaml" in result.out


def test_second_compile_changes_nothing(workdir: Path) -> None:
    _compile()
    mtimes = {p: p.stat().st_mtime_ns for p in (workdir / "out").rglob("*")}
    result = run_cli("compile", "--no-validate")
    assert result.out.startswith("out/ is up to date")
    assert {p: p.stat().st_mtime_ns for p in (workdir / "out").rglob("*")} == mtimes


def test_check_changed_compiles_only_the_specs_touched(workdir: Path) -> None:
    _compile()
    spec = workdir / "specs" / "inference-engine.yaml"
    spec.write_text(spec.read_text().replace("egress: 25Gbit/s", "egress: 20Gbit/s"))
    assert run_cli("check", "--changed", "specs/grpc-llm.yaml").code == 0
    assert run_cli("check", "--changed", "out/llm-serving/llm-grpc/kustomization.yaml").code == 0
    stale = run_cli("check", "--changed", "specs/inference-engine.yaml")
    assert stale.code == 1
    assert "+      bandwidth: 20G" in stale.out
    # A file that is not one spec's (a template, a shared file) means a full check.
    assert run_cli("check", "--changed", "templates/job.yaml.j2").code == 1
    assert run_cli("check", "--changed", "out/kustomization.yaml").code == 1


def test_check_changed_maps_an_edited_output_file_to_its_spec(workdir: Path) -> None:
    _compile()
    sa = workdir / "out/llm-serving/llm-grpc/serviceaccount-llm-grpc-weight-sync.yaml"
    sa.write_text(sa.read_text().replace("automountServiceAccountToken: false", "x: 1"))
    result = run_cli("check", "--changed", str(sa.relative_to(workdir)))
    assert result.code == 1
    assert "-x: 1" in result.out


def test_a_second_writer_is_refused(workdir: Path) -> None:
    with outdir.locked(workdir / "out"):
        result = run_cli("compile", "--no-validate")
    assert result.code == 2
    assert result.err == "standbyc: another standbyc is writing out; try again\n"


def test_many_written_files_are_made_durable_by_one_syncfs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From SYNCFS_FROM files on, one syncfs of the file system, not an fsync each (a
    journal commit each: seconds for a tree of 200 specs); fewer files are fsynced."""
    assert fsutil._libc("syncfs") is not None  # Linux: the fast path is really taken
    fsynced: list[Path] = []
    monkeypatch.setattr(fsutil, "fsync_path", fsynced.append)
    files = [tmp_path / f"f{i}" for i in range(fsutil.SYNCFS_FROM)]
    for f in files:
        f.write_text("x")
    fsutil.sync_files(files, tmp_path)
    assert fsynced == []
    fsutil.sync_files(files[:2], tmp_path)
    assert fsynced == files[:2]


def test_the_swap_waits_for_the_flush_and_a_failed_flush_swaps_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The staged files are flushed while the gate validates them; the swap comes only
    after both, and never when the flush failed."""
    out = tmp_path / "out"
    header = "# standbyc: generated — do not edit. Source: specs/x.yaml\n"
    assert outdir.replace(out, lambda _: {"a.yaml": header + "a: 1\n"})
    before = tree(out)
    order: list[str] = []

    def flush(paths: list[Path], directory: Path) -> None:
        order.append("flush")
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(outdir, "sync_files", flush)
    with pytest.raises(OSError, match="Input/output error"):
        outdir.replace(
            out, lambda _: {"a.yaml": header + "a: 2\n"}, validate=lambda _: order.append("gate")
        )
    assert sorted(order) == ["flush", "gate"]
    assert tree(out) == before
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # no staged tree left


def test_the_shipped_crd_stays_while_a_kept_spec_needs_it(workdir: Path) -> None:
    """Compiling one spec that emits no CiliumEgressQoS keeps the CRD for the other
    spec's (read from its kept file); once no spec emits one, the CRD goes."""
    spec = workdir / "specs" / "grpc-llm.yaml"
    text = spec.read_text()
    assert "outputs: [ciliumEgressQoS, kyverno, kustomizePatch]" in text
    spec.write_text(
        text.replace("outputs: [ciliumEgressQoS, kyverno, kustomizePatch]", "outputs: [kyverno]")
    )
    crd = (
        workdir
        / "out"
        / pipeline.CRD_DIR
        / "customresourcedefinition-ciliumegressqoses.cilium.io.yaml"
    )
    _compile()
    assert crd.is_file()
    _compile("specs/grpc-llm.yaml")
    assert crd.is_file()
    (workdir / "specs" / "inference-engine.yaml").unlink()
    _compile()
    assert not crd.exists()
