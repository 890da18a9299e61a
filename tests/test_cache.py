"""The cache of rendered specs and validator passes: the same inputs give byte-identical
output without rendering or running a tool again; any changed input, or a damaged entry,
is a miss."""

from __future__ import annotations

from pathlib import Path

import pytest

from compiler import outdir, pipeline
from compiler.api import compile_tree
from compiler.render.base import packaged_templates
from tests.conftest import tree


@pytest.fixture
def cache_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("STANDBYC_CACHE", "on")
    monkeypatch.setenv("STANDBYC_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_unchanged_specs_render_and_validate_nothing_again(
    workdir: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = compile_tree()
    assert first.ok and first.written
    written = tree(workdir / "out")

    def no_render(*args: object) -> None:
        raise AssertionError("rendered although nothing changed")

    monkeypatch.setattr(pipeline, "_render", no_render)
    second = compile_tree()
    assert second.ok and not second.written
    assert second.report is not None
    assert second.report.reused > 0
    assert {k: v for k, v in second.report.tool_seconds.items() if v} == {}
    assert tree(workdir / "out") == written


def test_a_changed_template_is_a_miss(workdir: Path, cache_dir: Path, tmp_path: Path) -> None:
    assert compile_tree().ok
    overrides = tmp_path / "templates"
    overrides.mkdir()
    sa = (packaged_templates() / "serviceaccount.yaml.j2").read_text()
    (overrides / "serviceaccount.yaml.j2").write_text(
        sa.replace("automountServiceAccountToken: false", "automountServiceAccountToken: true")
    )
    result = compile_tree(templates=overrides)
    assert result.ok and result.written
    text = (
        workdir / "out/inference-system/inference-engine/"
        "serviceaccount-inference-engine-weight-sync.yaml"
    ).read_text()
    assert "automountServiceAccountToken: true" in text


@pytest.mark.parametrize(
    "damage",
    [
        b"{not json",
        b"[]",
        b'{"files": 1, "objects": []}',
        b'{"files": {"../../etc/x": "y"}, "objects": []}',
    ],
    ids=["not-json", "a-list", "wrong-types", "a-file-outside-the-spec"],
)
def test_a_damaged_entry_is_a_miss(workdir: Path, cache_dir: Path, damage: bytes) -> None:
    assert compile_tree().ok
    written = tree(workdir / "out")
    damaged = 0
    for entry in (cache_dir / "compile").rglob("*"):
        if entry.is_file():
            entry.write_bytes(damage)
            damaged += 1
    assert damaged == 2  # one per example spec
    result = compile_tree()
    assert result.ok and not result.written
    assert tree(workdir / "out") == written


def test_an_out_with_crlf_newlines_is_up_to_date_and_validated_as_it_is(
    workdir: Path, cache_dir: Path
) -> None:
    """A checkout that turned LF into CRLF holds the same text, so nothing is written;
    but the gate validates the bytes on disk, not the text standbyc has in memory."""
    assert compile_tree().ok
    again = compile_tree()
    assert again.ok and again.report is not None and not any(again.report.tool_seconds.values())
    rel = "inference-system/inference-engine/configmap-inference-engine-connection-pool.yaml"
    path = workdir / "out" / rel
    crlf = path.read_bytes().replace(b"\n", b"\r\n")
    path.write_bytes(crlf)
    contents = outdir.read(workdir / "out")
    assert rel in contents.translated and "\r" not in contents.owned[rel]
    third = compile_tree()
    assert third.ok and not third.written
    assert path.read_bytes() == crlf
    assert third.report is not None and third.report.tool_seconds.get("kubeconform", 0) > 0
