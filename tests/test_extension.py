"""The extension points: a new kind is one renderer module and one row of the kinds table;
a new output format is one writer module."""

from __future__ import annotations

import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from compiler import kinds, output, render
from compiler.api import compile_tree
from compiler.emitted import Emitted
from compiler.output import json_writer, text_writer
from compiler.plan import Plan
from compiler.render.base import Renderer, filename
from tests.conftest import REPO

TOY = kinds.Kind("PodMonitor", "monitoring.coreos.com/v1", wave=3, name_limit=40)


def _toy_render(plan: Plan, r: Renderer) -> list[Emitted]:
    """The whole module a new kind needs: a renderer of bare objects."""
    name = f"{plan.name}-toy"
    obj = r.render("podmonitor.yaml.j2", {"name": name, "selector": plan.engine.selector}, TOY.kind)
    return [Emitted(filename(TOY.kind, name), obj, labels={"toy": "yes"})]


def _add_row(monkeypatch: pytest.MonkeyPatch, row: kinds.Kind) -> None:
    """The new kind's row, placed before Job in the apply order."""
    rows = [k for k in kinds.KINDS if k.kind != row.kind]
    job = [k.kind for k in rows].index("Job")
    monkeypatch.setattr(kinds, "KINDS", (*rows[:job], row, *rows[job:]))
    monkeypatch.setitem(kinds.BY_NAME, row.kind, row)


@pytest.fixture
def toy_kind(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Register one module (a renderer and its template) and one row; nothing else."""
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "podmonitor.yaml.j2").write_text(
        "apiVersion: monitoring.coreos.com/v1\nkind: PodMonitor\nmetadata:\n"
        "  name: {{ name | q }}\nspec:\n  selector:\n    matchLabels: {{ selector | q }}\n"
    )
    _add_row(monkeypatch, TOY)
    monkeypatch.setitem(render.OUTPUTS, "toy", _toy_render)
    return templates


def test_a_new_kind_is_one_module_and_one_row(toy_kind: Path, tmp_path: Path) -> None:
    spec = REPO / "specs" / "inference-engine.yaml"
    result = compile_tree([spec], tmp_path / "out", validate=False, templates=toy_kind)
    assert result.ok and result.written
    directory = "inference-system/inference-engine"
    toy = next(e for e in result.objects if e.kind == "PodMonitor")
    # The metadata pass decorated it from the row: namespace, common labels, own label, wave.
    assert toy.obj["metadata"] == {
        "name": "inference-engine-toy",
        "namespace": "inference-system",
        "labels": {
            "app.kubernetes.io/managed-by": "standbyc",
            "app.kubernetes.io/part-of": "inference-engine",
            "toy": "yes",
        },
        "annotations": {"argocd.argoproj.io/sync-wave": "3"},
    }
    # Ordered by its row (before Job), and listed for kustomize because the row is applied.
    order = [e.kind for e in result.objects if e.is_resource]
    assert order.index("PodMonitor") == order.index("Job") - 1
    kustomization = result.files[f"{directory}/kustomization.yaml"]
    assert "podmonitor-inference-engine-toy.yaml" in kustomization
    assert (tmp_path / "out" / directory / "podmonitor-inference-engine-toy.yaml").is_file()


def test_the_row_sets_the_name_limit(
    toy_kind: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _add_row(monkeypatch, kinds.Kind(TOY.kind, TOY.api_version, wave=3, name_limit=10))
    spec = REPO / "specs" / "inference-engine.yaml"
    result = compile_tree([spec], tmp_path / "out", validate=False, templates=toy_kind)
    assert [d.message for d in result.diagnostics] == [
        "derived PodMonitor name 'inference-engine-toy' is 20 characters; a PodMonitor name "
        "has at most 10, so shorten metadata.name"
    ]
    assert result.diagnostics[0].location.path == "metadata.name"
    assert not (tmp_path / "out").exists()


@dataclass(frozen=True)
class _Outcome:
    exit_code: int = 1

    def to_json(self) -> dict[str, Any]:
        return {"ok": False, "n": 1}

    def text(self) -> str:
        return "some lines"

    def problem(self) -> str:
        return "it went wrong"


def _write(writer: output.Writer) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    writer(_Outcome(), out, err)
    return out.getvalue(), err.getvalue()


def test_text_writer() -> None:
    assert _write(text_writer.write) == ("some lines\n", "standbyc: it went wrong\n")


def test_json_writer_prints_one_document_even_on_failure() -> None:
    out, err = _write(json_writer.write)
    # The document, and what every document that is not ok says: its exit code and error.
    assert json.loads(out) == {"ok": False, "n": 1, "exitCode": 1, "error": "it went wrong"}
    assert err == ""


def test_every_format_is_offered() -> None:
    assert sorted(output.FORMATS) == ["json", "junit", "text"]
