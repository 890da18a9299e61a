"""The cache of rendered specs and validator passes: the same inputs give byte-identical
output without rendering or running a tool again; any changed input, or a damaged entry,
is a miss."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from compiler import outdir, pipeline
from compiler.api import compile_tree
from compiler.gate.schemas import MANIFEST, SchemaDir
from compiler.render.base import packaged_templates
from compiler.reuse import store
from compiler.reuse.keys import schemas_key
from tests.conftest import REPO, tree


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
        b"{no marker",
        b"z not zlib",
        b"={not json",
        b"=[]",
        b'={"files": 1, "objects": []}',
        b'={"files": {"../../etc/x": "y"}, "objects": []}',
        b'={"data": {}, "name": ["s.yaml", "1", 1, ""], "warnings": []}',
        b'={"data": {}, "name": ["s.yaml", 1, 1, ""], "warnings": [["s.yaml", "w"]]}',
    ],
    ids=[
        "no-marker",
        "not-zlib",
        "not-json",
        "a-list",
        "wrong-types",
        "a-file-outside-the-spec",
        "a-line-that-is-no-number",
        "a-warning-without-a-location",
    ],
)
def test_a_damaged_entry_is_a_miss(workdir: Path, cache_dir: Path, damage: bytes) -> None:
    assert compile_tree().ok
    written = tree(workdir / "out")
    with sqlite3.connect(cache_dir / store.DB_NAME) as db:
        damaged = db.execute("UPDATE entries SET v = ? WHERE area = 'compile'", (damage,))
    assert damaged.rowcount == 4  # two per example spec: what its text parsed to, its rendering
    result = compile_tree()
    assert result.ok and not result.written
    assert tree(workdir / "out") == written


def test_a_cache_file_that_is_not_a_database_is_set_aside(workdir: Path, cache_dir: Path) -> None:
    assert compile_tree().ok
    written = tree(workdir / "out")
    db = cache_dir / store.DB_NAME
    for suffix in ("-wal", "-shm"):
        db.with_name(db.name + suffix).unlink(missing_ok=True)
    db.write_bytes(b"not a database, say a disk error" * 100)
    result = subprocess.run(  # a new process: this one keeps its connection open
        [sys.executable, "-m", "compiler", "compile"],
        cwd=workdir,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert tree(workdir / "out") == written
    assert db.with_name(db.name + ".damaged").read_bytes().startswith(b"not a database")
    with sqlite3.connect(db) as fresh:  # remembered again, in a new file
        assert fresh.execute("SELECT count(*) FROM entries").fetchone()[0] > 0


def test_a_locked_cache_is_not_set_aside(cache_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Only a file that is not a database is set aside; one that is locked by another
    standbyc for longer than the timeout is used by none of this process' lookups."""
    db = cache_dir / store.DB_NAME
    cache_dir.mkdir(parents=True)
    with sqlite3.connect(db) as healthy:
        healthy.execute("CREATE TABLE t (x)")

    def locked(*args: object, **kwargs: object) -> sqlite3.Connection:
        raise sqlite3.OperationalError("database is locked")

    monkeypatch.setattr(store.sqlite3, "connect", locked)
    assert store._open(cache_dir) is None
    assert db.is_file() and not db.with_name(db.name + ".damaged").exists()


NO_NAMESPACE = "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\nmetadata:\n  name: extra\n"


def test_an_unchanged_spec_is_not_parsed_again(
    workdir: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = workdir / "specs" / "extra.yaml"
    spec.write_text(NO_NAMESPACE)
    first = compile_tree()
    assert first.ok
    assert "specs/extra.yaml:4:3: metadata: metadata.namespace is not set" in first.warnings[0]

    def no_parse(*args: object) -> None:
        raise AssertionError("parsed although the text is the same")

    parse = pipeline.load_text
    monkeypatch.setattr(pipeline, "load_text", no_parse)
    second = compile_tree()
    assert second.ok and not second.written
    assert second.warnings == first.warnings
    assert [s.name_location for s in second.specs] == [s.name_location for s in first.specs]
    # A comment changes no data, but moves every location: the text is parsed again.
    monkeypatch.setattr(pipeline, "load_text", parse)
    spec.write_text("# a comment\n" + NO_NAMESPACE)
    third = compile_tree()
    assert third.ok
    assert "specs/extra.yaml:5:3: metadata: metadata.namespace is not set" in third.warnings[0]


def test_specs_seen_before_and_new_ones_compile_alike(
    workdir: Path, cache_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Specs compiled before stay in this process, the others go to the pool: the tree
    is the same as one compiled with no cache at all."""
    monkeypatch.setattr(pipeline, "PARALLEL_FROM", 2)
    seed = (workdir / "specs" / "inference-engine.yaml").read_text()
    for i in range(4):
        text = seed.replace("name: inference-engine", f"name: engine-{i}")
        (workdir / "specs" / f"engine-{i}.yaml").write_text(text)
    assert compile_tree().ok
    for i in (1, 3):
        spec = workdir / "specs" / f"engine-{i}.yaml"
        spec.write_text(spec.read_text().replace("replicas: 3", "replicas: 2"))
    mixed = compile_tree()
    assert mixed.ok and mixed.written
    monkeypatch.setenv("STANDBYC_CACHE", "off")
    assert compile_tree(out=workdir / "fresh").ok
    assert tree(workdir / "out") == tree(workdir / "fresh")


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


HOLD = """
import sqlite3, sys, time
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("PRAGMA locking_mode=EXCLUSIVE")
db.execute("BEGIN EXCLUSIVE")
db.execute("INSERT OR REPLACE INTO entries (area, k, v) VALUES ('x', 'held', x'3d')")
print("held", flush=True)
time.sleep(120)
"""


def test_a_cache_another_process_holds_costs_no_time(cache_dir: Path) -> None:
    """Another process holds the cache in an exclusive transaction (as a crashed or stuck
    standbyc could): every lookup is a miss at once and no write waits, instead of each
    waiting for SQLite's busy timeout."""
    subprocess.run(  # the database exists, with its table (made by a process now gone)
        [sys.executable, "-c", "from compiler.reuse import store; store.Store('g').put('k')"],
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=True,
    )
    db = cache_dir / store.DB_NAME
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLD, str(db)], stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "held\n"
        fresh = subprocess.run(  # a new process: it opens the held database
            [sys.executable, "-c", _LOOKUPS],
            env={**os.environ, "PYTHONPATH": str(REPO)},
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        holder.kill()
        holder.wait()
    misses, seconds = fresh.stdout.split()
    assert misses == "1000"
    # 1,000 lookups and 1,000 writes; each waiting the old 30 s timeout would take hours,
    # each waiting BUSY_MS would take over a minute.
    assert float(seconds) < 5 * store.BUSY_MS / 1000 + 5


_LOOKUPS = """
import time
from compiler.reuse import store
kept = store.Store("gate")
t0 = time.perf_counter()
misses = sum(kept.get(f"k{i}") is None for i in range(1000))
for i in range(1000):
    kept.put(f"n{i}", b"x")
print(misses, time.perf_counter() - t0)
"""


def test_templates_behind_a_symlink_are_keyed_by_what_they_hold(tmp_path: Path) -> None:
    """A renderer's templates reached through a symlinked directory or file are part of
    its key: changing the target changes the key."""
    real = tmp_path / "real"
    real.mkdir()
    (real / "extra.yaml.j2").write_text("a: 1\n")
    (tmp_path / "single.yaml.j2").write_text("b: 1\n")
    templates = tmp_path / "templates"
    templates.mkdir()
    (templates / "linked").symlink_to(real, target_is_directory=True)
    (templates / "one.yaml.j2").symlink_to(tmp_path / "single.yaml.j2")
    (templates / "loop").symlink_to(templates, target_is_directory=True)  # visited once
    before = store.tree_digest(templates)
    (real / "extra.yaml.j2").write_text("a: 2\n")
    after_dir = store.tree_digest(templates)
    (tmp_path / "single.yaml.j2").write_text("b: 2\n")
    after_file = store.tree_digest(templates)
    assert len({before, after_dir, after_file}) == 3


def test_the_code_digest_holds_the_library_versions(monkeypatch: pytest.MonkeyPatch) -> None:
    """A cached rendering or pass is not found again under another jinja2, ruamel.yaml,
    PyYAML, pydantic or standbyc."""
    store.code_digest.cache_clear()
    before = store.code_digest()
    for name in store.LIBRARIES:
        real = store.metadata.version

        def other(dist: str, name: str = name, real: object = real) -> str:
            return "0.0.0-other" if dist == name else real(dist)  # type: ignore[operator]

        monkeypatch.setattr(store.metadata, "version", other)
        store.code_digest.cache_clear()
        assert store.code_digest() != before, name
        monkeypatch.undo()
    store.code_digest.cache_clear()
    assert store.code_digest() == before


def test_a_version_built_later_leaves_the_other_versions_passes_standing(
    tmp_path: Path, cache_dir: Path
) -> None:
    """Another run that builds one more Kubernetes version into the same schema directory
    rewrites its manifest; the schemas of the versions this run reads are unchanged, and so
    is their key (their kubeconform passes stay found)."""
    shared = REPO / ".cache" / "schemas"
    root = tmp_path / "schemas"
    (root / "kubernetes").mkdir(parents=True)
    (root / "crds").symlink_to(shared / "crds")
    (root / "kubernetes" / "v1.35.0").symlink_to(shared / "kubernetes" / "v1.35.0")
    manifest = json.loads((shared / MANIFEST).read_text())
    manifest["kubernetes"] = {"1.35": manifest["kubernetes"]["1.35"]}
    (root / MANIFEST).write_text(json.dumps(manifest))
    before = schemas_key(SchemaDir(root), ["1.35"])

    manifest["kubernetes"]["1.36"] = {"files": 1}
    (root / MANIFEST).write_text(json.dumps(manifest))
    (root / "kubernetes" / "v1.36.0").mkdir()
    assert schemas_key(SchemaDir(root), ["1.35"]) == before

    manifest["pins_sha256"] = "0" * 64  # built from other pins: another schema set
    (root / MANIFEST).write_text(json.dumps(manifest))
    assert schemas_key(SchemaDir(root), ["1.35"]) != before
