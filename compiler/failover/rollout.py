"""A new generation, from the publisher's first byte to every pod of a tier serving it: the
steps really run one after the other (publish, the trigger, the Job, its download, the
rebuild on the claim, the signature check, then the engines' reloads in waves), each with
its formula and the source of its numbers."""

from __future__ import annotations

from dataclasses import dataclass

from compiler import units
from compiler.failover import calibration
from compiler.failover.inputs import Inputs, TierRollout
from compiler.failover.numbers import Step


@dataclass(frozen=True)
class TierTime:
    tier: str
    steps: tuple[Step, ...]
    seconds: float
    storage_bytes: int  # what the rebuild and the reloads move over the claim
    meanwhile: str  # what the tier can still serve while it reloads
    job_seconds: float  # the Job's own part: from its start to its last reload
    deadline_s: int  # the Job's activeDeadlineSeconds

    @property
    def over_deadline(self) -> bool:
        return self.job_seconds > self.deadline_s


def _s(seconds: float) -> str:
    return units.human_seconds(seconds)


def _bytes(n: float) -> str:
    return units.human_bytes(n)


def _head(i: Inputs) -> list[tuple[str, float, str]]:
    """Publish, trigger and Job start: what every tier waits for."""
    r = i.rollout
    publish = i.model_bytes / r.publish_rate.value
    how = (
        f"the publisher writes the generation with the whole model as a full anchor: "
        f"{_bytes(i.model_bytes)} at {r.publish_rate.label()}"
    )
    if r.sign_rate is not None:
        publish += i.model_bytes / r.sign_rate.value
        how += f", then signs it, hashing it at {r.sign_rate.label()}"
    trigger = (
        f"the Job runs on its schedule: the longest gap {r.trigger_wait.label()}"
        if r.trigger == "schedule"
        else f"Argo CD syncs the commit that raises model.generation: {r.trigger_wait.label()}"
    )
    return [
        ("publish", publish, how),
        ("trigger", r.trigger_wait.value, trigger),
        ("Job start", r.job_start.value, r.job_start.label()),
    ]


def _download(i: Inputs, t: TierRollout, fetched: int, whole: bool) -> tuple[float, str]:
    """The tier's rate, or what the sync writes and hashes as it receives (and, for a whole
    model, what the claim takes), whichever is slowest."""
    r = i.rollout
    parts = [
        (fetched * 8 / t.sync_rate_bps,
         f"{_bytes(fetched)} at the tier's weight-sync rate {units.human_bits(t.sync_rate_bps)} "
         "(egress x weightSync.bandwidthShare)"),
        (fetched / r.receive_rate.value, f"written and hashed at {r.receive_rate.label()}"),
    ]  # fmt: skip
    if whole:
        parts.append((fetched / i.claim_rate.value, f"onto the claim at {i.claim_rate.label()}"))
    seconds = max(s for s, _ in parts)
    how = ", or ".join(f"{text} ({_s(s)})" for s, text in parts)
    return seconds, f"{how}, whichever is slowest"


def rebuild_seconds(model_bytes: int, rebuild_bps: float, claim_bps: float) -> float:
    """A rebuild of the whole model directory: at the sync's own rate, or reading the model
    it has and writing the new one over the claim, whichever is slower (bytes/s)."""
    return max(model_bytes / rebuild_bps, 2 * model_bytes / claim_bps)


def job_rebuild_seconds(model_bytes: int, claim_bps: float, verified: bool) -> float:
    """What a weight-sync Job spends after its download, at the measured rates: what its
    deadline must allow besides the downloads and the reload (``plan.builders``)."""
    out = rebuild_seconds(model_bytes, calibration.REBUILD.value, claim_bps)
    return out + (model_bytes / calibration.VERIFY.value if verified else 0.0)


def _sync(i: Inputs, t: TierRollout, base: bool) -> list[tuple[str, float, str]]:
    """The Job's own work: download, rebuild (or the swap of a whole download), verify, or
    its measured duration."""
    r = i.rollout
    if t.measured_sync is not None and base:
        return [("download, rebuild, verify", t.measured_sync.value, t.measured_sync.label())]
    fetched = r.delta_bytes if base else i.model_bytes
    download = ("download", *_download(i, t, fetched, not base))
    if base:
        cpu = i.model_bytes / r.rebuild_rate.value
        # It reads the model it has and writes the new one, both on the claim.
        claim = 2 * i.model_bytes / i.claim_rate.value
        seconds = rebuild_seconds(i.model_bytes, r.rebuild_rate.value, i.claim_rate.value)
        done = ("rebuild", seconds,
                f"the whole model directory is rebuilt, whatever the delta: "
                f"{_bytes(i.model_bytes)} at {r.rebuild_rate.label()} ({_s(cpu)}), or "
                f"{_bytes(2 * i.model_bytes)} over the claim at {i.claim_rate.label()} "
                f"({_s(claim)}), whichever is slower")  # fmt: skip
    else:
        swap = i.model_bytes / r.place_rate.value
        done = ("swap", swap, f"{_bytes(i.model_bytes)} checked and swapped in at "
                              f"{r.place_rate.label()}")  # fmt: skip
    out = [download, done]
    if r.verify_rate is not None:
        out.append(("verify", i.model_bytes / r.verify_rate.value,
                    f"the signature's hash of {_bytes(i.model_bytes)} at "
                    f"{r.verify_rate.label()}"))  # fmt: skip
    return out


def _steps(parts: list[tuple[str, float, str]]) -> tuple[Step, ...]:
    at, out = 0.0, []
    for name, seconds, how in parts:
        at += seconds
        out.append(Step(name, at, f"{_s(seconds)}: {how}"))
    return tuple(out)


def tier(i: Inputs, t: TierRollout) -> TierTime:
    parts = _head(i) + _sync(i, t, True)
    storage = 2 * i.model_bytes
    if t.api is None:
        meanwhile = "its engines load it when they next restart (reload: restart)"
    else:
        reload = t.measured_reload or i.reload
        parts.append(("reloads", t.waves * reload.value,
                      f"{t.waves} wave(s) of {t.max_unavailable} pod(s) x {reload.label()}, "
                      "each pod reading the whole model from the claim, then asked what it "
                      "serves (the Job's read-back, a request a pod)"))  # fmt: skip
        storage += t.replicas * i.model_bytes
        if t.serves_while_loading:
            meanwhile = "every pod serves meanwhile (the old instance until the new one is ready)"
        else:
            meanwhile = (
                f"at most {t.max_unavailable} of its {t.replicas} pod(s) load at once and serve "
                f"nothing: a failover meanwhile finds {t.replicas - t.max_unavailable} ready"
            )
    steps = _steps(parts)
    started = next(s.at for s in steps if s.name == "Job start")
    return TierTime(t.tier, steps, steps[-1].at, storage, meanwhile, steps[-1].at - started,
                    t.job_deadline_s)  # fmt: skip


def full_copy_steps(i: Inputs, name: str) -> list[Step]:
    """A tier with no weights: its next scheduled Job fetches the whole model, then its
    engines start and read it from the claim."""
    t = next(t for t in i.rollout.tiers if t.tier == name)
    r = i.rollout
    parts = [
        ("trigger", r.trigger_wait.value, f"its next scheduled run: {r.trigger_wait.label()}"),
        ("Job start", r.job_start.value, r.job_start.label()),
        *_sync(i, t, False),
        ("warm-up", i.warmup,
         f"{i.engine_start.label()} + the model read from the claim "
         f"({_bytes(i.model_bytes)} at {i.claim_rate.label()})"),
    ]  # fmt: skip
    return list(_steps(parts))


@dataclass(frozen=True)
class FanOut:
    """N pullers fetching a new generation from one store at once."""

    label: str
    pullers: int
    bytes_each: int
    seconds_store: float  # from the in-cluster store: its egress or the pullers' rates bind
    store_binds: bool  # the store's egress, not the pullers' rate limits, sets the time
    seconds_object_store: float  # from an object store: each puller at its own rate


def fanout(i: Inputs) -> list[FanOut]:
    tiers = i.rollout.tiers
    if not tiers:
        return []
    slowest = min(t.sync_rate_bps for t in tiers)
    egress = min(i.store_egress_bps, i.link.value)
    names = ", ".join(t.tier for t in tiers)
    out = []
    for label, pullers, each in (
        (f"one Job per sync tier ({names}), a delta each", len(tiers), i.rollout.delta_bytes),
        ("one Job per sync tier, a full copy each (a new standby)", len(tiers), i.model_bytes),
        (f"per-replica copies, as the design had it: {i.standby_replicas} standbys, a full "
         "copy each", i.standby_replicas, i.model_bytes),
    ):  # fmt: skip
        store_s = pullers * each * 8 / egress
        own_s = each * 8 / slowest
        out.append(FanOut(label, pullers, each, max(store_s, own_s), store_s > own_s, own_s))
    return out
