"""A failover plan where the user stands: a missed objective counted in the summary, on
PLAN.md's first line and, where the spec asks, refusing the commit; the chart drawn for
every spec, in proportion, with the objective marked; `standbyc plan` pointing at a chart
it does not write; a bandwidth written in bytes named when it breaks the link budget."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from compiler import units
from compiler.admit import BANDWIDTH_FIELDS, admit, json_schema
from compiler.api import compile_tree
from compiler.load import load_text
from tests.conftest import run_cli

SVG = "{http://www.w3.org/2000/svg}"
HEAD = "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\n"


def _spec(path: Path, name: str, body: str) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    spec = path / f"{name}.yaml"
    spec.write_text(HEAD + f"metadata: {{name: {name}, namespace: ml}}\nspec:\n{body}")
    return spec


ONE_TIER = "  tiers:\n    hot: {replicas: 2, egress: 25Gbit/s}\n"
MISSED = ONE_TIER + "  failover: {rto: 30s}\n"


def test_a_missed_objective_is_counted_and_heads_plan_md(tmp_path: Path) -> None:
    spec = _spec(tmp_path / "specs", "solo", MISSED)
    result = run_cli("compile", str(spec), "--out", str(tmp_path / "out"), "--no-validate")
    assert result.code == 0, result.err
    assert "warning: " in result.err
    assert "objective missed: node loss serves again after 57.00 s" in result.err
    assert result.out.rstrip().endswith(
        "validation skipped (--no-validate); 5 warnings (1 missed failover objective(s), "
        "4 from the specs (on stderr))"  # the spec's own: no verify, size, link or outUrl
    )
    plan = (tmp_path / "out/ml/solo/PLAN.md").read_text().split("\n")
    assert plan[1] == "# Failover plan: ml/solo: OBJECTIVE MISSED"  # [0]: the generated header


def test_the_verdict_line_counts_every_warning(tmp_path: Path) -> None:
    """With the validators: their findings, the specs' own warnings and the missed
    objective in one count."""
    spec = _spec(tmp_path / "specs", "solo", MISSED.replace("namespace: ml", ""))
    spec.write_text(spec.read_text().replace(", namespace: ml", ""))
    result = run_cli("compile", str(spec), "--out", str(tmp_path / "out"))
    assert result.code == 0, result.err
    verdict = result.out.rstrip().rsplit("\n", 1)[1]
    match = re.fullmatch(r"PASSED: 0 errors, (\d+) warnings \((.*)\)", verdict)
    assert match, verdict
    assert "1 missed failover objective(s)" in match.group(2)
    # no namespace, verify, size, link or outUrl
    assert "5 from the specs (on stderr)" in match.group(2)
    assert result.err.count("warning: ") == int(match.group(1))


def test_failover_strict_refuses_only_its_own_spec_and_the_commit(tmp_path: Path) -> None:
    specs = tmp_path / "specs"
    _spec(specs, "lenient", MISSED)
    strict = _spec(specs, "strict", ONE_TIER + "  failover: {rto: 10m, strict: true}\n")
    out = tmp_path / "out"
    first = run_cli("compile", str(specs), "--out", str(out), "--no-validate")
    assert first.code == 0, first.err  # lenient misses (a warning); strict meets its own
    assert "warning: " in first.err and "error: " not in first.err
    assert run_cli("check", str(specs), "--out", str(out)).code == 0
    strict.write_text(strict.read_text().replace("rto: 10m", "rto: 20s"))
    before = sorted(p.read_bytes() for p in out.rglob("*") if p.is_file())
    refused = run_cli("compile", str(specs), "--out", str(out), "--no-validate")
    assert refused.code == 1
    assert "error: " in refused.err and "ml/strict: objective missed" in refused.err
    assert "warning: " in refused.err and "ml/lenient: objective missed" in refused.err
    assert sorted(p.read_bytes() for p in out.rglob("*") if p.is_file()) == before
    # The pre-commit hook (standbyc check) says why the commit is refused.
    check = run_cli("check", str(specs), "--out", str(out), "--changed", str(strict))
    assert check.code == 1
    assert "error: " in check.err and "ml/strict: objective missed" in check.err


def test_plan_points_at_the_chart_compile_writes(tmp_path: Path) -> None:
    spec = _spec(tmp_path / "specs", "solo", MISSED)
    result = run_cli("plan", str(spec))
    assert result.code == 0
    assert "](plan.svg)" not in result.out
    assert "(chart: `standbyc compile` writes it beside PLAN.md, as out/ml/solo/plan.svg)" in (
        result.out
    )


def _chart(tmp_path: Path, body: str) -> ElementTree.Element:
    spec = _spec(tmp_path / "specs", "solo", body)
    files = compile_tree([spec], tmp_path / "out", validate=False, write=False).files
    return ElementTree.fromstring(files["ml/solo/plan.svg"])


def test_the_chart_draws_the_takeover_against_its_caps(tmp_path: Path) -> None:
    """The takeover tier's traffic, held to its caps, is the chart's scale; the link far
    above it is named, not drawn off the plot."""
    root = _chart(tmp_path, ONE_TIER)
    texts = [t.text or "" for t in root.iter(f"{SVG}text")]
    assert "hot caps 2 x 25 Gbit/s" in texts
    assert "above: link: 100 Gbit/s" in texts
    assert "at first, with the retried answers: 50 Gbit/s" in texts
    lanes = [t for t in texts if t.startswith(("pod crash:", "engine hang:", "node loss:"))]
    assert lanes == ["pod crash: 3.00 s", "engine hang: 33.00 s", "node loss: 57.00 s"]


def test_the_time_axis_is_in_proportion_and_the_objective_marked(tmp_path: Path) -> None:
    root = _chart(tmp_path, MISSED)
    ticks = {t.text: float(t.get("x", 0)) for t in root.iter(f"{SVG}text")
             if (t.text or "").endswith(" s") and (t.text or "")[:-2].isdigit()}  # fmt: skip
    per_second = (ticks["60 s"] - ticks["0 s"]) / 60
    assert abs((ticks["20 s"] - ticks["0 s"]) / 20 - per_second) < 0.01
    # Each lane is red until its mode is served again: 3 s, 33 s, 57 s.
    down = [r for r in root.iter(f"{SVG}rect") if r.get("fill") == "#e15759"]
    widths = [float(r.get("width", 0)) for r in down[:3]]
    assert [round(w / per_second, 1) for w in widths] == [3.0, 33.0, 57.0]
    rto = [line for line in root.iter(f"{SVG}line") if line.get("stroke") == "#e15759"
           and line.get("stroke-width") == "2"]  # fmt: skip
    assert len(rto) == 1  # the objective, red: missed
    assert abs(float(rto[0].get("x1", 0)) - (ticks["0 s"] + 30 * per_second)) < 0.2
    assert "failover.rto 30s" in [t.text for t in root.iter(f"{SVG}text")]


def test_egress_in_bytes_past_the_link_says_bits_or_bytes(tmp_path: Path) -> None:
    spec = _spec(tmp_path / "specs", "solo", "  tiers:\n    hot: {replicas: 3, egress: 5GB/s}\n")
    result = run_cli("compile", str(spec), "--out", str(tmp_path / "out"), "--no-validate")
    assert result.code == 2
    assert "tier egress adds up to 3 x 40 Gbit/s = 120 Gbit/s, which exceeds" in result.err
    assert (
        "spec.tiers.hot.egress: '5GB/s' is bytes per second, 40 Gbit/s: a capital B is a "
        "byte. If you meant bits, write 5Gb/s"
    ) in result.err


def _bandwidth_paths(schema: dict[str, Any]) -> set[tuple[str, ...]]:
    """Every property of the spec's JSON schema that holds a bandwidth, as a path."""
    defs = schema.get("$defs", {})
    found: set[tuple[str, ...]] = set()

    def walk(node: Any, path: tuple[str, ...], seen: frozenset[str]) -> None:
        if not isinstance(node, dict):
            return
        if node.get("pattern") == units.BANDWIDTH_PATTERN:
            found.add(path)
        if (ref := node.get("$ref", "")).startswith("#/$defs/") and ref not in seen:
            walk(defs[ref.removeprefix("#/$defs/")], path, seen | {ref})
        for key in ("anyOf", "oneOf", "allOf"):
            for branch in node.get(key, []):
                walk(branch, path, seen)
        for name, sub in node.get("properties", {}).items():
            walk(sub, (*path, name), seen)
        for name in node.get("propertyNames", {}).get("enum", []):  # a map with named keys
            walk(node.get("additionalProperties"), (*path, name), seen)

    walk(schema, (), frozenset())
    return found


def test_every_bandwidth_a_spec_writes_in_bytes_is_said_to_be_bytes() -> None:
    """The note "a capital B is a byte" covers every bandwidth field of the spec, those
    added later included."""
    wanted = _bandwidth_paths(json_schema())
    assert wanted, "the schema names no bandwidth: the walk is wrong"
    assert wanted == set(BANDWIDTH_FIELDS)


def test_a_size_or_link_left_to_the_seed_is_said() -> None:
    """A spec without model.size or network.link got the seed's 14 GiB and 100 Gbit/s
    without a word, sizing its claim, deadlines and plan for another model."""
    bare = "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\nmetadata: {name: m}\n"
    said = {w.location.path: w.message for w in admit(load_text(bare, "m.yaml")).warnings}
    assert said["spec.model.size"].startswith("spec.model.size is not set: the seed's 14 GiB")
    assert said["spec.network.link"].startswith(
        "spec.network.link is not set: the seed's 100 Gbit/s"
    )
    sized = bare + "spec:\n  model: {size: 42GiB}\n  network: {link: 200Gbit/s}\n"
    said = {w.location.path for w in admit(load_text(sized, "m.yaml")).warnings}
    assert not {"spec.model.size", "spec.network.link"} & said
