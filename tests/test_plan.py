"""The failover plan as a model of what happens: the seed's numbers, each failure mode timed
from what the cluster and the compiled clients do, the takeover's egress against its caps,
storage counted, and verdicts that flip where reality does."""

from __future__ import annotations

import json
import re
from pathlib import Path
from xml.etree import ElementTree

import pytest
import yaml

from compiler.api import compile_tree
from compiler.failover import FailoverPlan, calibration
from compiler.plan import Plan
from tests.conftest import OUT, REPO, run_cli

SEED = REPO / "specs" / "inference-engine.yaml"
GRPC = REPO / "specs" / "grpc-llm.yaml"
HEAD = "apiVersion: standbyc.dev/v1alpha1\nkind: StandbySpec\n"
CLAIM = 500 * 2**20  # weightSync.claimReadRate's default, bytes/s


def _plan(*args: str) -> dict[str, object]:
    result = run_cli("plan", *args, "--format", "json")
    assert result.code == 0, result.err
    doc: dict[str, object] = json.loads(result.out)
    return doc


def compiled(tmp_path: Path, body: str, name: str = "variant") -> Plan:
    """The plan of a spec of ``body`` (the lines under ``spec:``)."""
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / f"{name}.yaml"
    path.write_text(HEAD + f"metadata: {{name: {name}, namespace: ml}}\nspec:\n{body}")
    result = compile_tree([path], tmp_path / "out", validate=False, write=False)
    assert not result.diagnostics, result.diagnostics
    (one,) = result.specs
    return one.plan


def variant(tmp_path: Path, spec: Path, *edits: tuple[str, str]) -> Plan:
    """The plan of an example spec with ``edits`` (old, new) made to its text."""
    text = spec.read_text()
    for old, new in edits:
        assert old in text, old
        text = text.replace(old, new, 1)
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / spec.name
    path.write_text(text)
    result = compile_tree([path], tmp_path / "out", validate=False, write=False)
    assert not result.diagnostics, result.diagnostics
    return result.specs[0].plan


def serving(f: FailoverPlan) -> dict[str, float | None]:
    return {m.mode: m.serving for m in f.modes}


def test_the_seed_scenario_numbers() -> None:
    (spec,) = _plan(str(SEED))["specs"]  # type: ignore[misc]
    failover = spec["failover"]
    # The design: 14 GiB x 3 replicas over 100 Gbit/s "3.5 s"; it is 360.78 Gbit, 3.61 s.
    assert failover["designCopy"] == {"bytes": 45097156608, "gigabits": 360.78, "seconds": 3.608}
    modes = {m["mode"]: m for m in failover["modes"]}
    assert list(modes) == ["crash", "hang", "nodeLoss"]
    # crash: the kubelet sees the exit (1 s) + the endpoint update (2 s)
    assert modes["crash"]["servingSeconds"] == 3.0
    # hang: 3 failed probes x 10 s, the last one timing out after 1 s, + 2 s
    assert modes["hang"]["servingSeconds"] == 33.0
    # node loss: node-monitor-grace-period 50 s + its 5 s period + 2 s
    assert modes["nodeLoss"]["servingSeconds"] == 57.0
    assert modes["hang"]["replacedSeconds"] is None  # nothing restarts a hung engine
    # A crashed pod comes back after a start (30 s) and 14 GiB read at 500 MiB/s (28.67 s).
    assert modes["crash"]["replacedSeconds"] == pytest.approx(1 + 30 + 14 * 1024 / 500 + 2, 1e-3)
    takeover = failover["takeover"]
    # One failed pod's 25 Gbit/s (by default, the hot cap) spread over three hot pods.
    assert takeover["perPodBitsPerSecond"] == pytest.approx(25e9 / 3)
    assert takeover["burstPerPodBitsPerSecond"] == pytest.approx(2 * 25e9 / 3)
    assert takeover["fits"] and takeover["burstFits"]
    assert failover["met"] is True
    assert failover["verdict"] == (
        "objective met: every failure mode serves again within failover.rto 2m "
        "(slowest: node loss serves again after 57.00 s)"
    )
    derived = spec["derived"]
    assert derived["healthChecks"]["probesPerSecond"] == 0.6  # 1 prober x 6 targets / 10 s
    # standbyc sends one delta per sync tier: 3 x 2% of 14 GiB, not 2% of six copies.
    assert derived["delta"]["bytes"] == 3 * int(14 * 2**30 * 0.02)
    sources = {row["name"]: row["source"] for row in spec["inputs"]}
    assert sources["network link"] == "declared"
    assert sources["node monitor grace period"] == "default"
    assert set(sources.values()) <= {"measured", "declared", "default"}


def test_a_sub_millisecond_figure_is_not_rounded_before_it_is_formatted(tmp_path: Path) -> None:
    plan = compiled(tmp_path, "  tiers:\n    hot: {replicas: 2, egress: 25Gbit/s}\n"
                    "  weightSync: {tiers: [hot]}\n")  # fmt: skip
    doc = plan_md(tmp_path, plan)
    seconds = plan.delta_seconds
    assert round(seconds, 3) != round(seconds, 4)  # the case the old rounding got wrong
    assert f"-> {seconds * 1000:.1f} ms at line rate" in doc


def plan_md(tmp_path: Path, plan: Plan) -> str:
    out = tmp_path / "out" / plan.namespace / plan.name / "PLAN.md"
    if not out.exists():
        compile_tree([tmp_path / f"{plan.name}.yaml"], tmp_path / "out", validate=False)
    return out.read_text()


# --- verdicts that flip where reality does ------------------------------------------------


def test_the_failure_mode_decides(tmp_path: Path) -> None:
    """A 30 s objective: a crash is served again in 3 s, a lost node only after the node
    grace period; the same spec is met for one and missed for the other."""
    crash = variant(tmp_path / "a", SEED, ("rto: 2m", "rto: 30s\n    modes: [crash]"))
    lost = variant(tmp_path / "b", SEED, ("rto: 2m", "rto: 30s\n    modes: [nodeLoss]"))
    assert crash.failover.met is True and serving(crash.failover) == {"crash": 3.0}
    assert lost.failover.met is False and serving(lost.failover) == {"nodeLoss": 57.0}
    assert lost.failover.verdict() == (
        "objective missed: node loss serves again after 57.00 s, over failover.rto 30s"
    )


def test_a_grpc_client_leaves_a_silent_pod_by_its_compiled_keepalive(tmp_path: Path) -> None:
    """The hang's time is the compiled keepalive (30 s + 10 s), not the probe; a shorter
    keepalive in the spec changes both the channel args emitted and the verdict."""
    plan = variant(tmp_path / "a", GRPC, ("rto: 90s", "rto: 30s\n    modes: [hang]"))
    assert serving(plan.failover) == {"hang": 40.0}
    assert plan.failover.met is False
    (advice, together) = plan.failover.advice
    assert advice.startswith("notice a silent peer sooner: connectionPool.grpc.keepaliveTime 20s")
    assert together == "with all of these: meets the objective (slowest 30.00 s)"
    # Taking the advice: the compiled channel args change, and the objective is met.
    edits = [
        ("rto: 90s", "rto: 30s\n    modes: [hang]"),
        ("keepaliveTime: 30s", "keepaliveTime: 20s"),
        ("keepaliveTimeout: 10s", "keepaliveTimeout: 5s"),
    ]
    fixed = variant(tmp_path / "b", GRPC, *edits)
    assert fixed.failover.met is True
    files = compile_tree([tmp_path / "b" / GRPC.name], tmp_path / "b" / "out", validate=False,
                         write=False).files  # fmt: skip
    cm = yaml.safe_load(files["llm-serving/llm-grpc/configmap-llm-grpc-grpc-channel-args.yaml"])
    client = json.loads(cm["data"]["client-channel-args.json"])
    assert client["grpc.keepalive_time_ms"] == 20_000
    assert client["grpc.keepalive_timeout_ms"] == 5_000


@pytest.mark.parametrize(("size", "met"), [("14GiB", True), ("140GiB", False)])
def test_a_standby_without_weights_pays_the_download_and_the_storage_read(
    tmp_path: Path, size: str, met: bool
) -> None:
    """No weights on the takeover tier: its next scheduled Job fetches the whole model, the
    claim takes it, and its engines start and read it back: 14 GiB fits a 5 minute
    objective, 140 GiB does not."""
    plan = compiled(tmp_path, (
        "  tiers:\n    hot: {replicas: 2, egress: 25Gbit/s}\n"
        f"  model: {{size: {size}}}\n"
        "  weightSync: {tiers: [hot], trigger: {type: schedule, schedule: '* * * * *'}}\n"
        "  failover: {rto: 5m, weights: missing, modes: [crash]}\n"
    ))  # fmt: skip
    (crash,) = plan.failover.modes
    names = [s.name for s in crash.steps]
    assert names.index("download") < names.index("swap") < names.index("warm-up")
    assert plan.failover.met is met
    gib = 14 if size == "14GiB" else 140
    model = gib * 2**30
    # trigger (the schedule's 60 s) + Job start 10 s + the download (what a sync writes and
    # hashes per second binds, below 12.5 Gbit/s and the claim's 500 MiB/s) + its swap +
    # the start (30 s) and the model read back from the claim.
    download = max(model * 8 / 12.5e9, model / calibration.RECEIVE.value, model / CLAIM)
    expected = 60 + 10 + download + model / calibration.PLACE.value + 30 + model / CLAIM
    assert crash.serving == pytest.approx(expected, rel=1e-6)


def test_the_claim_rate_flips_a_verdict_the_old_plan_met(tmp_path: Path) -> None:
    """The same spec on a claim that reads like local NVMe meets its objective; on the
    default network file system it misses: the engines' read of the model is counted, and
    no cap at the warm-up hides it."""
    body = (
        "  tiers:\n    hot: {replicas: 2, egress: 25Gbit/s}\n"
        "  weightSync: {tiers: [hot], trigger: {type: schedule, schedule: '* * * * *'}"
        "__CLAIM__}\n"
        "  failover: {rto: 3m, weights: missing, modes: [crash]}\n"
    )
    fast = compiled(tmp_path / "a", body.replace("__CLAIM__", ", claimReadRate: 4GB/s"))
    slow = compiled(tmp_path / "b", body.replace("__CLAIM__", ""))
    assert fast.failover.met is True
    assert slow.failover.met is False
    assert fast.failover.seconds is not None and slow.failover.seconds is not None
    # What differs is the warm-up's read of 14 GiB: at 500 MiB/s, not 4 GB/s.
    model = 14 * 2**30
    difference = model / CLAIM - model / 4e9
    assert slow.failover.seconds - fast.failover.seconds == pytest.approx(difference, 1e-6)


def test_a_takeover_over_its_cap_is_a_miss_and_says_so(tmp_path: Path) -> None:
    over = compiled(tmp_path / "a", (
        "  tiers:\n    hot: {replicas: 3, egress: 25Gbit/s}\n"
        "  failover: {rto: 2m, failedReplicas: 3, servingEgress: 40Gbit/s}\n"
    ))  # fmt: skip
    fits = compiled(tmp_path / "b", (
        "  tiers:\n    hot: {replicas: 3, egress: 25Gbit/s}\n"
        "  failover: {rto: 2m, failedReplicas: 3, servingEgress: 20Gbit/s}\n"
    ))  # fmt: skip
    assert over.failover.met is False
    assert over.failover.verdict() == (
        "objective missed: each hot pod sends 40 Gbit/s, over its 25 Gbit/s cap "
        "(tiers.hot.egress): Cilium holds it to the cap, so the takeover serves 62% of the "
        "failed pods' traffic and the rest waits"
    )
    assert over.failover.advice[0].startswith("give the hot tier 5 replicas (tiers.hot.replicas)")
    assert fits.failover.met is True
    doc = plan_md(tmp_path / "b", fits)
    assert (
        "each hot pod sends 20 Gbit/s, within its 25 Gbit/s cap, but 40 Gbit/s while the "
        "retried answers are sent again: the cap paces them"
    ) in doc
    assert "over its 25 Gbit/s cap" in plan_md(tmp_path / "a", over)


def test_a_standby_one_generation_behind_serves_at_once(tmp_path: Path) -> None:
    """Nothing in a failover starts a weight sync: behind and current serve alike."""
    behind = variant(tmp_path / "a", SEED, ("weights: behind", "weights: behind"))
    current = variant(tmp_path / "b", SEED, ("weights: behind", "weights: current"))
    assert serving(behind.failover) == serving(current.failover)
    assert "Ready before the failure, they serve it at once" in plan_md(tmp_path / "a", behind)


# --- what PLAN.md says --------------------------------------------------------------------

WRONG = [
    "phases run one after the other",  # the failure modes are not a pipeline
    "migrationParallelism",  # a knob nothing in the cluster read
    "migrate connections",
    "failover.drain",
    "no network traffic",  # the engines read the model over the claim
    "2 GB/s",  # the reload's old local-NVMe rate
    "at most failover.warmup",  # the cap that hid a miss
    "expected peak (12.5 Gbit/s",  # the weight sync's download as a failover's peak
]


@pytest.mark.parametrize("tree", ["inference-system/inference-engine", "llm-serving/llm-grpc"])
def test_no_claim_the_review_found_wrong_is_left(tree: str) -> None:
    doc = (OUT / tree / "PLAN.md").read_text()
    for claim in WRONG:
        assert claim not in doc, claim
    board = next((OUT / tree).glob("configmap-*-dashboard.yaml")).read_text()
    assert "expected peak" not in board


def test_every_input_says_where_it_comes_from() -> None:
    doc = (OUT / "inference-system/inference-engine/PLAN.md").read_text()
    table = doc.split("## Every number, and where it comes from")[1]
    rows = re.findall(r"^\| ([^|]+) \| ([^|]+) \| (\w+): ([^|]+) \|$", table, re.MULTILINE)
    assert len(rows) >= 15
    assert {source for _, _, source, _ in rows} <= {"measured", "declared", "default"}
    assert all(where.strip() for _, _, _, where in rows)


def test_knobs_nothing_reads_are_refused_with_the_reason(tmp_path: Path) -> None:
    spec = tmp_path / "old.yaml"
    spec.write_text(HEAD + "metadata: {name: old}\nspec:\n  failover:\n"
                    "    migrationParallelism: 8\n    drain: 5s\n")  # fmt: skip
    result = run_cli("compile", str(spec), "--out", str(tmp_path / "out"), "--no-validate")
    assert result.code == 2
    assert (
        f"{spec}:6:5: spec.failover.migrationParallelism: 'migrationParallelism' is no longer "
        "read: clients reconnect on their own, in parallel"
    ) in result.err
    assert f"{spec}:7:5: spec.failover.drain: 'drain' is no longer read" in result.err


# --- objectives, documents, chart ---------------------------------------------------------


def test_a_missed_objective_warns_and_strict_refuses(workdir: Path) -> None:
    spec = workdir / "specs" / "inference-engine.yaml"
    spec.write_text(spec.read_text().replace("rto: 2m", "rto: 40s"))
    result = run_cli("compile", "--no-validate")
    assert result.code == 0
    assert result.err.splitlines()[-1].endswith(
        "warning: specs/inference-engine.yaml: inference-system/inference-engine: "
        "objective missed: node loss serves again after 57.00 s, over failover.rto 40s"
    )
    plan = (workdir / "out/inference-system/inference-engine/PLAN.md").read_text()
    assert "## What would meet the objective" in plan
    assert "- mark a lost node sooner, cluster-wide: kube-controller-manager " in plan
    assert "with all of these: meets the objective" in plan
    before = (workdir / "out/inference-system/inference-engine/PLAN.md").read_bytes()
    spec.write_text(spec.read_text().replace("rto: 40s", "rto: 20s"))
    strict = run_cli("compile", "--no-validate", "--strict")
    assert strict.code == 1
    assert strict.err.endswith("over failover.rto 20s; out/ was left unchanged\n")
    assert (workdir / "out/inference-system/inference-engine/PLAN.md").read_bytes() == before
    spec.write_text(
        spec.read_text().replace("weights: behind", "weights: behind\n    strict: true")
    )
    assert run_cli("compile", "--no-validate").code == 1  # failover.strict in the spec
    assert run_cli("plan", "--strict").code == 1


def test_plan_documents_are_not_applied() -> None:
    directory = OUT / "inference-system" / "inference-engine"
    assert (directory / "PLAN.md").is_file() and (directory / "plan.svg").is_file()
    kustomization = (directory / "kustomization.yaml").read_text()
    assert "PLAN.md" not in kustomization and "plan.svg" not in kustomization


@pytest.mark.parametrize("spec", sorted((REPO / "specs").glob("*.yaml")), ids=lambda p: p.stem)
def test_the_chart_is_well_formed_and_byte_stable(spec: Path, tmp_path: Path) -> None:
    runs = [
        compile_tree([spec], tmp_path / name / "out", validate=False, write=False).files
        for name in ("a", "b")
    ]
    charts = [text for files in runs for path, text in files.items() if path.endswith("/plan.svg")]
    assert len(charts) == 2 and charts[0] == charts[1]
    root = ElementTree.fromstring(charts[0])
    assert root.tag == "{http://www.w3.org/2000/svg}svg"
    assert root.get("width") == "820"  # GitHub shows it whole in a PR at its default width
    texts = " ".join(t.text or "" for t in root.iter("{http://www.w3.org/2000/svg}text"))
    assert "link" in texts and "hot caps" in texts and "objective met" in texts
    assert "node loss:" in texts and "pod crash:" in texts


def test_the_rollout_is_held_to_the_jobs_deadline(tmp_path: Path) -> None:
    """A 500 GiB model on a network file system: the computed deadline allows the rebuild
    the plan expects; a written one too short for it is named in PLAN.md."""
    body = (
        "  tiers:\n    hot: {replicas: 1, egress: 100Gbit/s}\n  network: {link: 400Gbit/s}\n"
        "  model: {size: 500GiB}\n  weightSync: {tiers: [hot]__DEADLINE__}\n"
    )
    computed = compiled(tmp_path / "a", body.replace("__DEADLINE__", ""))
    (tier,) = computed.failover.rollouts
    assert tier.deadline_s == computed.tiers[0].job_deadline_s
    assert not tier.over_deadline and tier.job_seconds > 30 * 60  # past the 30 min default
    short = compiled(tmp_path / "b", body.replace("__DEADLINE__", ", activeDeadline: 30m"))
    (tier,) = short.failover.rollouts
    assert tier.over_deadline
    assert "**its Job's deadline, 1800 s, is shorter than its part of this rollout" in plan_md(
        tmp_path / "b", short
    )
