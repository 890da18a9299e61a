"""The ``standbyc weights`` actions on a store: publish, sync and report (imported only when
one of them runs; the actions on checkpoints: checkpoints.py)."""

from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import math
import signal
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from compiler.commands.weights.checkpoints import emit_result, path_bytes
from compiler.commands.weights.exits import EXIT_NOT_LOADED, EXIT_UNREACHABLE, exit_code
from compiler.engines import UNLOAD_FIRST
from compiler.errors import UsageError
from compiler.output import Message, emit
from compiler.units import parse_bandwidth, parse_size
from compiler.urls import http_url, is_s3
from compiler.weights import BUDGET_COPIES, BUDGET_SLACK, DEFAULT_EXCLUDES, RELOAD_APIS
from compiler.weights.errors import WeightsError
from compiler.weights.progress import byte_progress
from compiler.weights.sync.errors import NoPermission, StateDamaged, SyncBusy
from compiler.weights.sync.fetch import MIN_RATE, Fetcher
from compiler.weights.sync.index import Index
from compiler.weights.sync.keys import check_trust
from compiler.weights.sync.merge_policy import MergePolicy
from compiler.weights.sync.publish import PublishOptions, PublishStats, publish
from compiler.weights.sync.pull import Reload, Save, SyncResult, sync
from compiler.weights.sync.reload import MAX_PODS, Engines, Outcome, reload
from compiler.weights.sync.report import Reporter
from compiler.weights.sync.sign import Signer, prepare
from compiler.weights.sync.signed import Trust
from compiler.weights.sync.standby import StandbyDir, held_generation
from compiler.weights.sync.verify import Verifier, refused_generation


def cmd_publish(args: argparse.Namespace) -> int:
    try:
        cap = parse_size(args.max_file_size)
    except ValueError as exc:
        raise UsageError(f"--max-file-size: {exc}") from None
    excludes = [*([] if args.no_default_excludes else DEFAULT_EXCLUDES), *args.exclude]
    store, writer = _store(args)
    signature = prepare(args.path, args.generation, _signer(args), excludes, args.model or "")
    total = 2 * path_bytes(args.path)  # hash it, then diff against the last anchor
    with byte_progress("publish", total, args.format == "text") as prog:
        options = PublishOptions(
            anchor_every=args.anchor_every,
            keep=args.keep,
            chunk=args.chunk_size,
            anchor_drift=args.anchor_drift,
            merge=MergePolicy(args.merge, args.merge_window, args.merge_bound),
            excludes=tuple(excludes),
            max_file_size=cap,
            allow_unsigned=args.allow_unsigned,
        )
        stats = publish(args.path, store, args.generation, options, writer=writer, progress=prog)
    doc = stats.to_json() | {"store": str(args.to), "signature": signature}
    if writer is not None:
        doc |= writer.stats.to_json() | {"cache": str(store)}
    if stats.already:
        line = f"{args.to}: generation {stats.generation} is already published"
    else:
        line = _published(args, stats, doc, store, writer, signature)
    emit_result(args, doc, line)
    return 0


def _published(  # noqa: PLR0917 - the publish's arguments and what it returned
    args: argparse.Namespace, stats: PublishStats, doc: dict[str, Any], store: Path,
    writer: Any, signature: dict[str, Any],
) -> str:  # fmt: skip
    """The text line of a publish that wrote a generation."""
    delta = (
        f"delta from {stats.delta_from}: {stats.delta_bytes} bytes "
        f"({100 * doc['delta_ratio']:.2f}% of {stats.checkpoint_bytes})"
        if stats.delta_from is not None
        else "first generation: anchor only"
    )
    unchanged = stats.files - len(stats.files_new)
    files = (
        f"; {stats.files} other file(s): {len(stats.files_new)} new content "
        f"({stats.files_bytes} bytes), {unchanged} already stored, "
        f"{len(stats.files_patched)} with a patch ({stats.patch_bytes} bytes)"
    )
    if stats.delta_base == "manifest":
        delta += f" (against its manifest: {stats.delta_from}'s weights are not in {store}"
        if writer is not None:
            delta += "; without --no-fetch-base they are downloaded for an XOR delta"
        delta += ")"
    line = f"{args.to}: published generation {stats.generation}; weights {delta}{files}"
    if signature["how"] != "unsigned":
        line += f"; {signature['how']} by {signature['by']}"
    if stats.new_store:
        line += "; a new store (there was no index)"
    if stats.merged:
        line += (
            f"; {len(stats.merged)} merged delta(s) from generations "
            f"{', '.join(str(f) for f, _ in stats.merged)} "
            f"({sum(n for _, n in stats.merged)} bytes)"
        )
    if stats.merge_stopped:
        line += f"; merged deltas stop at {stats.merge_stopped}"
    if stats.pruned:
        line += f"; pruned {len(stats.pruned)} files"
    if writer is not None:
        up = writer.stats
        if up.base_bytes:
            line += (
                f"; downloaded generation {stats.delta_from}'s weights ({up.base_bytes} "
                f"bytes) for the delta: the cache lacked them (kept for the next one)"
            )
        line += (
            f"; uploaded {up.objects} object(s), {up.bytes_sent} bytes"
            + (f" ({up.resumed_bytes} bytes already sent by a stopped run)"
               if up.resumed_bytes else "")
            + (f", {up.kept} already there" if up.kept else "")
        )  # fmt: skip
    return line


def _store(args: argparse.Namespace) -> tuple[Path, Any]:
    """The directory the publish writes, and for ``s3://`` the bucket's writer (the
    directory is then its local cache)."""
    if not is_s3(args.to):
        for flag in ("endpoint_url", "profile", "cache", "rate_limit", "fetch_base"):
            if getattr(args, flag) is not None:
                raise UsageError(f"--{flag.replace('_', '-')} is for an s3:// store")
        return Path(args.to), None
    try:
        part = parse_size(args.part_size)
    except ValueError as exc:
        raise UsageError(f"--part-size: {exc}") from None
    from compiler.weights.sync.s3access import access
    from compiler.weights.sync.stores.s3 import S3Store, default_cache

    bucket = access(args.to, endpoint_url=args.endpoint_url, profile=args.profile)
    rate = _bandwidth(args.rate_limit, "--rate-limit")
    window = 0 if args.merge == "off" else args.merge_window
    writer = S3Store(bucket, part_size=part, rate_bits_per_second=rate,
                     fetch_base=args.fetch_base is not False, merge_window=window,
                     notice=_notice)  # fmt: skip
    return args.cache or default_cache(bucket), writer


def _signer(args: argparse.Namespace) -> Signer | None:
    if args.sign_key is None:
        if args.sign_cert or args.sign_chain:
            raise UsageError("--sign-cert and --sign-chain need --sign-key")
        return None
    if not args.model:
        raise UsageError(
            "--sign-key needs --model NAME, the model's name as the spec names it "
            "(model.name): the signature binds it, so another model's standbys refuse it"
        )
    return Signer(args.sign_key, args.sign_cert, tuple(args.sign_chain), args.sign_hash,
                  args.model)  # fmt: skip


def _verifier(args: argparse.Namespace) -> Verifier | None:
    """The signature a generation needs before it is swapped in (--verify)."""
    needs = {"key": (), "certificate": ("identity",), "sigstore": ("identity", "issuer")}
    given = [f for f in ("trust", "identity", "issuer") if getattr(args, f"verify_{f}")]
    if args.verify is None:
        if given or args.verify_model:
            raise UsageError(f"--verify-{(given or ['model'])[0]} needs --verify")
        return None
    for flag in ("trust", *needs[args.verify]):
        if flag not in given:
            raise UsageError(f"--verify {args.verify} needs --verify-{flag}")
    extra = set(given) - {"trust", *needs[args.verify]}
    if extra:
        raise UsageError(f"--verify-{extra.pop()} is not for --verify {args.verify}")
    if not args.verify_trust.is_file():
        raise UsageError(f"--verify-trust {args.verify_trust}: no such file")
    # Before anything is downloaded: a trust file of the wrong kind refuses nothing useful.
    check_trust(args.verify, args.verify_trust)
    trust = Trust(args.verify, args.verify_trust, args.verify_identity or "",
                  args.verify_issuer or "", args.verify_model or "")  # fmt: skip
    return Verifier(trust)


def _labels(pairs: list[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise UsageError(f"--label {pair!r}: expected KEY=VALUE")
        out[key] = value
    return out


JOB_UID = 65532  # the weight-sync image's user and group (Dockerfile, the Job's securityContext)


def _engines(args: argparse.Namespace) -> Engines | None:
    if args.reload is None:
        for flag in ("engines", "engine_model_path", "engine_model", "engine_swap",
                     "reload_deadline"):  # fmt: skip
            if getattr(args, flag):
                raise UsageError(f"--{flag.replace('_', '-')} needs --reload")
        return None
    if not args.engines or not args.engine_model_path:
        raise UsageError("--reload needs --engines and --engine-model-path")
    if not 0 < args.reload_timeout < 86400:
        raise UsageError("--reload-timeout: seconds, above 0 and below a day")
    _seconds(args.reload_deadline, "--reload-deadline")
    if not 1 <= args.max_unavailable <= MAX_PODS:
        raise UsageError(f"--max-unavailable {args.max_unavailable}: from 1 to {MAX_PODS}")
    if not 0 <= args.expect_pods <= MAX_PODS:
        raise UsageError(f"--expect-pods {args.expect_pods}: from 0 to {MAX_PODS}")
    swap = UNLOAD_FIRST if args.engine_swap == UNLOAD_FIRST else ""
    return Engines(args.reload, args.engines, args.engine_model_path, args.reload_timeout,
                   args.engine_model or "", swap, args.max_unavailable, args.expect_pods,
                   args.reload_deadline)  # fmt: skip


def _asker(engines: Engines | None) -> Reload | None:
    """The reload step of a sync. While it runs, SIGTERM (a Job's deadline, its pod
    deleted) lets the wave in flight finish, resumes what it paused, and starts no other;
    the Job's grace period is set to cover that (docs/engine-reload.md)."""
    if engines is None:
        return None

    def ask(generation: int, record: dict[str, Any], save: Save, other: frozenset[str]) -> Any:
        stop = threading.Event()
        previous = signal.signal(signal.SIGTERM, lambda *_: stop.set())
        try:
            return reload(engines, generation, record, save=save, stop=stop, other_weights=other)
        finally:
            signal.signal(signal.SIGTERM, previous)

    return ask


def _seconds(value: float | None, flag: str, *, low: float = 0.0) -> None:
    """A number of seconds a flag may take: finite, above ``low``, below a week."""
    if value is not None and not (math.isfinite(value) and low < value < 7 * 86400):
        raise UsageError(f"{flag} {value}: seconds, above {low:g} and below a week")


def _bandwidth(value: str | None, flag: str) -> float | None:
    try:
        return parse_bandwidth(value) if value else None
    except ValueError as exc:
        raise UsageError(f"{flag}: {exc}") from None


def _fetcher(args: argparse.Namespace, rate: float | None, **options: Any) -> Fetcher:
    """The store's fetcher: for ``s3://`` with the bucket's endpoint and signed requests."""
    if not is_s3(args.source):
        return Fetcher(args.source, rate, **options)
    from compiler.weights.sync.s3access import access

    bucket = access(args.source, endpoint_url=args.endpoint_url, profile=args.profile)
    return Fetcher(bucket.http_base, rate, s3=bucket, **options)


def _notice(text: str) -> None:
    """What a long wait is for, as it begins (stderr: stdout keeps the one document)."""
    print(f"standbyc: {text}", file=sys.stderr, flush=True)


@dataclass
class _Budget:
    """The sync's budget: ``--deadline`` from the start; by default BUDGET_SLACK for the
    index to come, then, from then on, BUDGET_SLACK plus BUDGET_COPIES full copies of the
    generation at the slowest rate the sync accepts: a sync run by hand ends too."""

    given: float | None  # --deadline
    generation: int
    slowest: float  # bit/s: --min-rate, or --rate-limit when lower
    seconds: float = 0.0  # the budget in force

    def start(self) -> float:
        self.seconds = BUDGET_SLACK if self.given is None else self.given
        return time.monotonic() + self.seconds

    def sized(self, fetcher: Fetcher, index: Index) -> None:
        gen = index.generations.get(self.generation)
        if self.given is None and gen is not None:
            self.seconds = BUDGET_SLACK + BUDGET_COPIES * gen.size * 8 / self.slowest
            fetcher.deadline = time.monotonic() + self.seconds


def _unwritable(exc: OSError, target: Path) -> NoPermission | None:
    """The sync's error for a claim it cannot write (None for another OSError): who must
    own what, or why the file system is read-only."""
    where = exc.filename or target
    if exc.errno == errno.EROFS:
        return NoPermission(
            f"{where}: read-only file system. The weight-sync Job writes the model directory "
            f"and .standbyc/ beside it, so {target.parent} must be on a volume mounted "
            "read-write: the Job's volumeMount and the claim's access mode must not be "
            "read-only; if they are not, the file system was remounted read-only after "
            "errors (the node's kernel log says why) and needs repair before a sync can write"
        )
    if not isinstance(exc, PermissionError):
        return None
    return NoPermission(
        f"{where}: permission denied. The weight-sync Job runs as uid {JOB_UID}, gid "
        f"{JOB_UID}, and writes the model directory and .standbyc/ beside it, so "
        f"{target.parent} must be writable by that user or group. The Job sets fsGroup "
        f"{JOB_UID}, but most ReadWriteMany volumes (NFS, CephFS, EFS) do not apply fsGroup: "
        f"chown -R {JOB_UID}:{JOB_UID} the claim's directory (or make it group-writable for "
        f"gid {JOB_UID})"
    )


def cmd_sync(args: argparse.Namespace) -> int:
    rate = _bandwidth(args.rate_limit, "--rate-limit")
    min_rate = _bandwidth(args.min_rate, "--min-rate") or MIN_RATE
    _seconds(args.timeout, "--timeout")
    _seconds(args.deadline, "--deadline")
    _seconds(args.lock_wait, "--lock-wait", low=-1.0)
    if not 0 <= args.retries <= 100:
        raise UsageError(f"--retries {args.retries}: from 0 to 100")
    if args.pushgateway:
        try:
            http_url(args.pushgateway)
        except ValueError as exc:
            raise UsageError(f"--pushgateway: {exc}") from None
    labels = _labels(args.label)
    engines = _engines(args)
    budget = _Budget(args.deadline, args.generation, min(rate or min_rate, min_rate))
    verifier = _verifier(args)
    fetcher = _fetcher(args, rate, retries=args.retries, timeout=args.timeout,
                       min_rate=min_rate, deadline=budget.start(), notice=_notice)  # fmt: skip
    result = SyncResult()  # what the sync learned, also when it fails
    error: WeightsError | None = None
    try:
        sync(fetcher, args.target, args.generation, lock_wait=args.lock_wait,
             reload=_asker(engines), on_index=functools.partial(budget.sized, fetcher),
             verify=verifier, into=result, allow_rollback=args.allow_rollback)  # fmt: skip
    except WeightsError as exc:
        error = exc
    except OSError as exc:
        error = _unwritable(exc, args.target)
        if error is None:
            raise
    finally:
        fetcher.close()
    held = args.generation if error is None else held_generation(args.target)
    if result.status == "newer":
        held = result.previous
    # What the last verification refused (a sync that failed before it keeps the last).
    refused = None if verifier is None else refused_generation(args.target) or 0
    if args.pushgateway and (held is not None or refused):
        reloaded = result.reload
        if engines is not None and reloaded is None and held is not None:
            # Nothing was asked this time: what the engines last confirmed still stands.
            reloaded = Outcome.recorded(engines.api, held, StandbyDir(args.target).served())
        reporter = Reporter(args.pushgateway, labels)
        result.reported = reporter.push(
            held, reloaded, StandbyDir(args.target).last_sync(), refused
        )
        result.report_error = reporter.error
    doc = result.to_json(args.target, args.generation)
    doc |= {"ok": error is None, "held_generation": held,
            "deadline_seconds": round(budget.seconds, 3)}  # fmt: skip
    doc["refused_generation"] = refused
    if error is not None:
        doc["error"] = str(error)
        return emit(Message(doc, "", str(error), exit_code(error)), args.format)
    if result.reload is not None and result.reload.failed:
        doc["ok"] = False
        doc["error"] = f"generation {args.generation} is on disk, but not every engine loaded it"
        return emit(
            Message(doc, "", result.text(args.target, args.generation), EXIT_NOT_LOADED),
            args.format,
        )
    return emit(Message(doc, result.text(args.target, args.generation)), args.format)


def _report_tier(
    name: str, target: Path, api: str | None, url: str, labels: dict[str, str]
) -> dict[str, Any]:
    """Push again what one tier's last sync pushed, read from its state; under the
    target's lock, so that a sync's own push never lands before this older one."""
    doc: dict[str, Any] = {"tier": name, "target": str(target), "pushed": False}
    local = StandbyDir(target)
    with contextlib.ExitStack() as stack:
        try:
            stack.enter_context(local.locked(0.0))
        except SyncBusy:
            doc["skipped"] = "a sync of this tier is running; it reports when it ends"
            return doc
        except StateDamaged as exc:
            doc["skipped"] = str(exc)
            return doc
        except OSError:
            pass  # a claim this pod cannot write: no sync can change it either
        held = held_generation(target)
        refused = refused_generation(target)
        doc["held_generation"], doc["refused_generation"] = held, refused
        if held is None and not refused:
            doc["skipped"] = "the tier holds no generation yet; nothing to report"
            return doc
        reloaded = (
            None if api is None or held is None else Outcome.recorded(api, held, local.served())
        )
        if reloaded is not None:
            doc["served_generation"] = reloaded.served
            doc["reload_failed_pods"] = reloaded.failed
        reporter = Reporter(url, {**labels, "tier": name})
        doc["pushed"] = reporter.push(held, reloaded, local.last_sync(), refused)
        if not doc["pushed"]:
            doc["error"] = reporter.error
    return doc


def cmd_report(args: argparse.Namespace) -> int:
    try:
        http_url(args.pushgateway)
    except ValueError as exc:
        raise UsageError(f"--pushgateway: {exc}") from None
    labels = _labels(args.label)
    if "tier" in labels:
        raise UsageError("--label tier=...: each --tier sets its own")
    tiers: dict[str, Path] = {}
    for name, target in args.tier:
        if name in tiers:
            raise UsageError(f"--tier {name} given twice")
        tiers[name] = Path(target)
    apis: dict[str, str] = {}
    for name, api in args.reload:
        if name not in tiers:
            raise UsageError(f"--reload {name}: no --tier {name}")
        if api not in RELOAD_APIS:
            raise UsageError(f"--reload {name} {api}: one of {', '.join(RELOAD_APIS)}")
        apis[name] = api
    results = [
        _report_tier(name, target, apis.get(name), args.pushgateway, labels)
        for name, target in tiers.items()
    ]
    failed = [r for r in results if "error" in r]
    lines = []
    for r in results:
        pushed = f"pushed generation {r.get('held_generation')}"
        lines.append(f"{r['tier']}: {pushed if r['pushed'] else r.get('skipped', 'not pushed')}")
    doc = {"ok": not failed, "tiers": results}
    if failed:
        error = f"the Pushgateway {args.pushgateway} did not take the report: {failed[0]['error']}"
        doc["error"] = error
        return emit(Message(doc, "", "\n".join([*lines, error]), EXIT_UNREACHABLE), args.format)
    return emit(Message(doc, "\n".join(lines)), args.format)
