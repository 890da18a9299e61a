"""Spec values can never add YAML structure to the output."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from compiler import decorate, yamlio
from compiler.render.base import packaged_templates
from tests.conftest import run_cli

HOSTILE = [
    "x: y",
    "a\nkind: Secret",
    "}{ [ ] ,",
    "'single' \"double\" \\back",
    "- list item",
    "yes",
    "0x1F",
    "*alias &anchor !!python/object",
    "--- \n...",
    "{{ jinja }} {% raw %}",
    "emoji \U0001f600 and a check mark \u2713",
    "line\u2028separator and next\u0085line",
]

SPEC = """\
apiVersion: standbyc.dev/v1alpha1
kind: StandbySpec
metadata:
  name: engine
  namespace: ns
spec:
  commonAnnotations:
    example.com/note: {value}
"""


@pytest.mark.parametrize("value", HOSTILE)
def test_free_text_stays_one_string(value: str, tmp_path: Path) -> None:

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(value=yamlio.double_quoted(value)))
    result = run_cli("compile", str(spec), "--out", str(tmp_path / "out"), "--no-validate")
    assert result.code == 0, result.err
    files = sorted((tmp_path / "out" / "ns" / "engine").glob("*.yaml"))
    assert files
    yaml = YAML(typ="safe")
    for path in files:
        if path.name == "kustomization.yaml":
            continue
        docs = list(yaml.load_all(path.read_text()))
        assert len(docs) == 1, path
        assert docs[0]["metadata"]["annotations"]["example.com/note"] == value, path
        assert docs[0]["kind"] != "Secret"


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("name", "a\nkind: Secret"),
        ("name", "x: y"),
        ("namespace", "ns\n---\nkind: Secret"),
    ],
)
def test_structural_values_are_refused(field: str, value: str, tmp_path: Path) -> None:

    body = SPEC.format(value='"ok"').replace(
        f"  {field}: {'engine' if field == 'name' else 'ns'}\n", f"  {field}: {json.dumps(value)}\n"
    )
    spec = tmp_path / "spec.yaml"
    spec.write_text(body)
    result = run_cli("compile", str(spec), "--out", str(tmp_path / "out"), "--no-validate")
    assert result.code == 2
    assert f"metadata.{field}: {value!r} is not a valid Kubernetes name" in result.err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "name",
    [
        "x\n---\n{apiVersion: v1, kind: Secret, metadata: {name: s}}\n---\n#.yaml",
        "cr\rlf.yaml",
        "line\u2028sep.yaml",
        "not-utf8-\udcff.yaml",
    ],
)
def test_a_spec_file_name_cannot_inject_a_document(name: str, tmp_path: Path) -> None:
    """The header names the spec file; any name is written so it stays one comment."""
    spec = tmp_path / "specs" / name
    spec.parent.mkdir()
    spec.write_text(SPEC.format(value="ok"))
    result = run_cli("compile", str(tmp_path / "specs"), "--out", str(tmp_path / "out"),
                     "--no-validate")  # fmt: skip
    assert result.code == 0, result.err
    yaml = YAML(typ="safe")
    files = sorted((tmp_path / "out").rglob("*.yaml"))
    kinds = [doc.get("kind") for f in files for doc in yaml.load_all(f.read_bytes()) if doc]
    assert "Secret" not in kinds
    assert all(len(list(yaml.load_all(f.read_bytes()))) == 1 for f in files)
    assert run_cli("check", str(tmp_path / "specs"), "--out", str(tmp_path / "out")).code == 0


def test_a_file_that_does_not_read_back_as_its_object_is_never_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The end check: if any channel ever injected a document, nothing is written."""
    real = decorate.yamlio.document

    def injected(obj: object, source: str) -> str:
        return real(obj, source) + "---\napiVersion: v1\nkind: Secret\nmetadata: {name: s}\n"

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(value="ok"))
    monkeypatch.setattr(decorate.yamlio, "document", injected)
    result = run_cli("compile", str(spec), "--out", str(tmp_path / "out"), "--no-validate")
    assert result.code == 3
    assert "emitted text reads back as 2 document(s)" in result.err
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("line", "refusal"),
    [
        ("automountServiceAccountToken: &a false\nimagePullSecrets: *a", "an alias"),
        ("automountServiceAccountToken: !!bool false", "explicit tag"),
        ("automountServiceAccountToken: !custom false", "explicit tag"),
        ("<<: {}\nautomountServiceAccountToken: false", "merge"),
        (
            "automountServiceAccountToken: true\nautomountServiceAccountToken: false",
            "a duplicate key ('automountServiceAccountToken')",
        ),
    ],
)
def test_a_template_that_renders_more_than_plain_data_is_refused(
    line: str, refusal: str, tmp_path: Path
) -> None:
    """Rendered text is read as plain YAML 1.1 data: what a tag, an alias, a merge key or
    a duplicate key would make of it is never guessed."""
    overrides = tmp_path / "templates"
    overrides.mkdir()
    sa = (packaged_templates() / "serviceaccount.yaml.j2").read_text()
    assert "automountServiceAccountToken: false" in sa
    (overrides / "serviceaccount.yaml.j2").write_text(
        sa.replace("automountServiceAccountToken: false", line)
    )
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(value="ok"))
    out = tmp_path / "out"
    result = run_cli("compile", str(spec), "--out", str(out), "--templates", str(overrides))
    assert result.code == 2, result.err
    assert "serviceaccount.yaml.j2: rendered text is not plain data" in result.err
    assert refusal in result.err
    assert not out.exists()


def test_a_template_is_read_as_kubernetes_reads_yaml(tmp_path: Path) -> None:
    """YAML 1.1, as Kubernetes reads a manifest: ``on`` in a template is a boolean."""
    overrides = tmp_path / "templates"
    overrides.mkdir()
    sa = (packaged_templates() / "serviceaccount.yaml.j2").read_text()
    (overrides / "serviceaccount.yaml.j2").write_text(
        sa.replace("automountServiceAccountToken: false", "automountServiceAccountToken: on")
    )
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(value="ok"))
    out = tmp_path / "out"
    result = run_cli("compile", str(spec), "--out", str(out), "--no-validate", "--templates",
                     str(overrides))  # fmt: skip
    assert result.code == 0, result.err
    (written,) = out.glob("ns/engine/serviceaccount-*.yaml")
    assert "automountServiceAccountToken: true\n" in written.read_text()
