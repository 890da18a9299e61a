"""The parser of ``standbyc weights`` and its actions (``register``).

Only the parser lives here; the actions (``checkpoints.py`` and ``run.py``, with numpy,
zstandard, ...) are imported when a weights command runs, so other commands start fast.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

from compiler.commands.weights import exits
from compiler.commands.weights.exits import WeightsFailed
from compiler.output import add_format_option
from compiler.weights import DEFAULT_CHUNK, DEFAULT_EXCLUDES, RELOAD_APIS
from compiler.weights.errors import WeightsError

CHUNK_HELP = "bytes per hashed chunk, a power of two (default 1 MiB)"


def _actions(module: str) -> ModuleType:
    """The module of an action, imported when the action runs."""
    if module == "checkpoints":
        return importlib.import_module("compiler.commands.weights.checkpoints")
    return importlib.import_module("compiler.commands.weights.run")


def _lazy(name: str, module: str = "run") -> Callable[[argparse.Namespace], int]:
    """The action ``name`` of ``module`` (run.py or checkpoints.py); a library error becomes
    the exit code it means."""

    def run(args: argparse.Namespace) -> int:
        impl = _actions(module)
        try:
            result: int = getattr(impl, name)(args)
        except WeightsError as exc:
            raise WeightsFailed(exc) from exc
        return result

    return run


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("weights", help="lossless, verified safetensors deltas")
    wsub = p.add_subparsers(dest="weights_command", metavar="ACTION", parser_class=type(p))
    wsub.required = True

    m = wsub.add_parser("manifest", help="hash a checkpoint (file or sharded directory)")
    m.add_argument(
        "path", type=Path, metavar="FILE|DIR", help="a checkpoint: a file or a directory"
    )
    m.add_argument("-o", "--output", type=Path, help="write the manifest here (default stdout)")
    m.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK, help=CHUNK_HELP)
    add_format_option(m)
    m.set_defaults(func=_lazy("cmd_manifest", "checkpoints"))

    d = wsub.add_parser("diff", help="write a delta from OLD (or its manifest) to NEW")
    d.add_argument(
        "paths", type=Path, nargs="+", metavar="OLD NEW", help="the two checkpoints (or NEW alone)"
    )
    d.add_argument(
        "-o", "--output", type=Path, required=True, metavar="DELTA", help="the delta to write"
    )
    d.add_argument(
        "--base-manifest",
        type=Path,
        metavar="M.json",
        help="diff against the standby's manifest instead of OLD's bytes",
    )
    d.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK, help=CHUNK_HELP)
    add_format_option(d)
    d.set_defaults(func=_lazy("cmd_diff", "checkpoints"))

    a = wsub.add_parser("apply", help="rebuild NEW from BASE and a delta, verified")
    a.add_argument("base", type=Path, metavar="BASE", help="the checkpoint the delta is for")
    a.add_argument("delta", type=Path, metavar="DELTA", help="the delta")
    where = a.add_mutually_exclusive_group(required=True)
    where.add_argument("-o", "--output", type=Path, metavar="OUT", help="write the result here")
    where.add_argument("--in-place", action="store_true", help="replace BASE atomically")
    a.add_argument(
        "--reread",
        action="store_true",
        help="before the rename, hash the written output again from the filesystem "
        "(its bytes are always hashed as they are written)",
    )
    add_format_option(a)
    a.set_defaults(func=_lazy("cmd_apply", "checkpoints"))

    _publish_parser(wsub)

    _sync_parser(wsub)
    _report_parser(wsub)

    v = wsub.add_parser("verify", help="check a checkpoint against a manifest")
    v.add_argument(
        "path", type=Path, metavar="FILE|DIR", help="a checkpoint: a file or a directory"
    )
    v.add_argument(
        "--manifest",
        type=Path,
        required=True,
        metavar="M.json",
        help="the manifest to check against",
    )
    add_format_option(v)
    v.set_defaults(func=_lazy("cmd_verify", "checkpoints"))


def _publish_parser(wsub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    pub = wsub.add_parser(
        "publish",
        help="publish a model directory as generation G into a store directory",
        description="A generation is a whole model directory: its safetensors weights and "
        "every other file (config, tokenizer, templates, ...), with their names. Write G's "
        "weights manifest, a weights delta from the latest published generation, G's "
        "anchor, and each other file whose content the store lacks (with a byte patch from "
        "the previous version where smaller) into STORE, then its index (last, "
        "atomically); prune what the index no longer needs. Any static HTTP server or "
        "object store can serve STORE as it is. With STORE s3://BUCKET/PREFIX the same "
        "goes straight to the bucket (the index last, with a conditional write). "
        + exits.described(exits.PUBLISH_EXITS),
    )
    pub.add_argument(
        "path",
        type=Path,
        metavar="DIR",
        help="the model directory (or one .safetensors file: a directory of that file)",
    )
    pub.add_argument(
        "--to",
        required=True,
        metavar="STORE",
        help="a store directory, or s3://BUCKET/PREFIX (data first, the index last with a "
        "conditional write)",
    )
    pub.add_argument(
        "--generation", type=int, required=True, metavar="G", help="its generation number"
    )
    pub.add_argument(
        "--anchor-every",
        type=int,
        default=64,
        metavar="K",
        help="keep a full copy at least every K-th generation (default 64; with "
        "--anchor-drift 0: of every K-th)",
    )
    pub.add_argument(
        "--anchor-drift",
        type=float,
        default=0.5,
        metavar="SHARE",
        help="keep a full copy once the deltas since the last one pass SHARE of the "
        "weights' bytes (default 0.5; 0: by --anchor-every alone)",
    )
    pub.add_argument(
        "--merge",
        choices=("greedy", "all", "off"),
        default="greedy",
        help="merged deltas from older generations to the newest: those a standby needs "
        "to fetch at most --merge-bound times the direct delta (greedy, default), every "
        "one in the window (all), or none (off)",
    )
    pub.add_argument(
        "--merge-window",
        type=int,
        default=64,
        metavar="N",
        help="merged deltas from at most N generations back (default 64)",
    )
    pub.add_argument(
        "--merge-bound",
        type=float,
        default=1.25,
        metavar="X",
        help="greedy: keep a merged delta when every other route costs more than X times "
        "its bytes (default 1.25)",
    )
    pub.add_argument(
        "--keep", type=int, default=65, metavar="N", help="generations to keep (default 65)"
    )
    pub.add_argument("--chunk-size", type=int, default=DEFAULT_CHUNK, help=CHUNK_HELP)
    pub.add_argument(
        "--exclude",
        action="append",
        default=[],
        metavar="GLOB",
        help="leave out paths matching GLOB (relative, with '/'; a directory takes its "
        "files along); repeatable. Always left out unless --no-default-excludes: "
        + ", ".join(DEFAULT_EXCLUDES),
    )
    pub.add_argument(
        "--no-default-excludes", action="store_true", help="publish .git and .cache too"
    )
    pub.add_argument(
        "--max-file-size",
        default="4GiB",
        metavar="SIZE",
        help="refuse a file other than the safetensors weights larger than this (default 4GiB)",
    )
    o = pub.add_argument_group("an s3:// store")
    _s3_options(o)
    o.add_argument(
        "--cache",
        type=Path,
        metavar="DIR",
        help="where the latest generation's weights are kept for the next delta, and "
        "uploads are resumed from (default ~/.cache/standbyc/publish/BUCKET/PREFIX)",
    )
    o.add_argument(
        "--fetch-base",
        action=argparse.BooleanOptionalAction,
        help="when the cache lacks the latest generation's weights (a fresh CI runner), "
        "download them to make an XOR delta (default; the delta every standby then fetches "
        "is often tens of times smaller); --no-fetch-base: download nothing and make the "
        "delta against their manifest (changed chunks stored whole)",
    )
    o.add_argument(
        "--part-size",
        default="64MiB",
        metavar="SIZE",
        help="files larger than this are uploaded in parts of this size, resumable (default "
        "64MiB; 5MiB to 512MiB, a part is held in memory)",
    )
    o.add_argument("--rate-limit", metavar="BANDWIDTH", help="of the uploads, for example 10Gbit/s")
    _sign_options(pub)
    add_format_option(pub)
    pub.set_defaults(func=_lazy("cmd_publish"))


def _sync_parser(wsub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    s = wsub.add_parser(
        "sync",
        help="bring a standby's model directory to generation G from a store",
        description="Download what changed, stage the whole next model directory beside "
        "the target, swap it in atomically, then ask the tier's engines to load it (with "
        "--reload). " + exits.described(exits.SYNC_EXITS),
    )
    s.add_argument(
        "--source",
        required=True,
        metavar="URL",
        help="the store's base URL: http(s)://..., or s3://BUCKET/PREFIX (signed with the "
        "AWS credentials of the environment, a profile or a web identity)",
    )
    _s3_options(s)
    s.add_argument(
        "--generation", type=int, required=True, metavar="G", help="the generation to hold"
    )
    s.add_argument(
        "--target",
        type=Path,
        required=True,
        metavar="DIR",
        help="the standby's model directory; state and partial downloads go beside it",
    )
    s.add_argument(
        "--rate-limit", metavar="BANDWIDTH", help="for example 12500Mbit/s (default: none)"
    )
    s.add_argument("--retries", type=int, default=8, help="retries per request (default 8)")
    s.add_argument(
        "--timeout",
        type=float,
        default=30.0,
        metavar="SECONDS",
        help="to connect, and for any wait for bytes; a request's whole deadline adds its "
        "bytes at --min-rate (default 30)",
    )
    s.add_argument(
        "--min-rate",
        metavar="BANDWIDTH",
        help="the slowest a request's body may come: its deadline is --timeout plus its "
        "bytes at this rate (default 100Mbit/s)",
    )
    s.add_argument(
        "--deadline",
        type=float,
        metavar="SECONDS",
        help="the whole sync's budget: past it nothing more is asked of the store (exit 4); "
        "default 5 minutes for the index, then 5 minutes plus two full copies of the "
        "generation at --min-rate (or --rate-limit if lower). Each wait between retries is "
        "announced on stderr",
    )
    s.add_argument(
        "--lock-wait",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="wait this long for another sync of the same target to finish (default 600)",
    )
    s.add_argument(
        "--allow-rollback",
        action="store_true",
        help="bring the target back to an earlier generation than it holds (without it, a "
        "target holding a later generation is left as it is: a late retry of an older Job "
        "never rolls a tier back)",
    )
    s.add_argument("--pushgateway", metavar="URL", help="report the generation held there")
    s.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="grouping label of the pushed metric (repeatable)",
    )
    r = s.add_argument_group("reload: ask the tier's running engines to load the new generation")
    r.add_argument(
        "--reload",
        choices=RELOAD_APIS,
        help="the engines' API; without it the engines load the new directory when they "
        "next start (docs/engine-reload.md)",
    )
    r.add_argument(
        "--engines",
        metavar="URL",
        help="http://HOST:PORT of the engines' API, HOST a name that resolves to every pod "
        "(the headless Service standbyc emits per tier)",
    )
    r.add_argument(
        "--engine-model-path",
        metavar="PATH",
        help="the model directory as the engines see it (spec.model.path)",
    )
    r.add_argument(
        "--engine-model",
        metavar="NAME",
        help="triton: the model's name in the repository",
    )
    r.add_argument(
        "--reload-timeout",
        type=float,
        default=600.0,
        metavar="SECONDS",
        help="how long one long step of a pod may take: its load, vLLM's drain (default 600)",
    )
    r.add_argument(
        "--engine-swap",
        choices=("side-by-side", "unload-first"),
        help="triton: load a new instance beside the old one (default), or unload the "
        "model first (for a model that does not fit twice; the pod serves nothing meanwhile)",
    )
    r.add_argument(
        "--max-unavailable",
        type=int,
        default=1,
        metavar="N",
        help="pods asked to load at once; the next wave starts when a wave has loaded, and "
        "none after a wave with a failure (default 1)",
    )
    r.add_argument(
        "--expect-pods",
        type=int,
        default=0,
        metavar="N",
        help="the tier's replicas: pods without a ready address count as not serving the "
        "generation (default 0: only the addresses found)",
    )
    r.add_argument(
        "--reload-deadline",
        type=float,
        metavar="SECONDS",
        help="the whole reload's budget: a wave starts only if a pod's whole sequence fits "
        "in what is left (default: the worst case for the pods found)",
    )
    _verify_options(s)
    add_format_option(s)
    s.set_defaults(func=_lazy("cmd_sync"))


def _sign_options(pub: argparse.ArgumentParser) -> None:
    g = pub.add_argument_group(
        "signing (OpenSSF Model Signing): DIR gets standbyc-generation.json and model.sig, "
        "as `model_signing sign` writes them; without --sign-key a model.sig already in DIR "
        "is kept, and must sign standbyc-generation.json with this generation"
    )
    g.add_argument("--sign-key", type=Path, metavar="KEY", help="a PEM EC private key")
    g.add_argument(
        "--model",
        metavar="NAME",
        help="the model this is a generation of, as the spec names it (model.name): the "
        "signature binds it with the generation (needed with --sign-key; without it, a "
        "model.sig already in DIR must name this model)",
    )
    g.add_argument(
        "--allow-unsigned",
        action="store_true",
        help="publish an unsigned generation into a store whose latest generation is signed "
        "(refused without it: every standby that verifies would refuse the generation)",
    )
    g.add_argument("--sign-cert", type=Path, metavar="CERT", help="its signing certificate (PEM)")
    g.add_argument(
        "--sign-chain",
        type=Path,
        action="append",
        default=[],
        metavar="PEM",
        help="certificates above --sign-cert (repeatable)",
    )
    g.add_argument(
        "--sign-hash",
        choices=("blake3", "sha256"),
        default="blake3",
        help="the hash the signature lists per file (default blake3: standbys verify it "
        "on every core)",
    )


def _verify_options(s: argparse.ArgumentParser) -> None:
    v = s.add_argument_group(
        "verify: swap in only a generation signed as required (OpenSSF Model Signing; "
        "the staged directory is verified, never the store's index)"
    )
    v.add_argument(
        "--verify",
        choices=("key", "certificate", "sigstore"),
        help="key: signed with the private key of --verify-trust; certificate: by a "
        "certificate for --verify-identity that chains to --verify-trust; sigstore: by "
        "--verify-identity from --verify-issuer, under the Sigstore trust configuration "
        "--verify-trust (offline)",
    )
    v.add_argument(
        "--verify-trust",
        type=Path,
        metavar="FILE",
        help="the PEM public key, the PEM certificate chain, or the Sigstore "
        "ClientTrustConfig JSON",
    )
    v.add_argument("--verify-identity", metavar="ID", help="the signer's identity")
    v.add_argument("--verify-issuer", metavar="URL", help="sigstore: the OIDC issuer")
    v.add_argument(
        "--verify-model",
        metavar="NAME",
        help="the model the generation must be signed as (the compiled Jobs give the spec's "
        "model.name): another model's signed generation is refused",
    )


def _s3_options(p: argparse._ActionsContainer) -> None:
    p.add_argument(
        "--endpoint-url",
        metavar="URL",
        help="an S3-compatible server (default: AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, "
        "else AWS's own)",
    )
    p.add_argument("--profile", metavar="NAME", help="the AWS profile (default: AWS_PROFILE)")


def _report_parser(wsub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    r = wsub.add_parser(
        "report",
        help="push again what each tier's last sync pushed (after a Pushgateway restart)",
        description="Read each tier's state beside its model directory and push the "
        "generation it holds (and, with --reload, what its engines were last confirmed "
        "to serve) to the Pushgateway, as its weight-sync Job did. A Pushgateway without "
        "persistence forgets every push when it restarts; the weight-report CronJob runs "
        "this on a schedule so the alerts see the truth again within minutes. A tier whose "
        "sync is running is skipped (the sync reports when it ends); a tier that holds "
        "nothing yet is not reported. Exit codes: 0 reported; 2 bad input; 3 internal "
        "error; 4 the Pushgateway did not take a report after every retry.",
    )
    r.add_argument("--pushgateway", required=True, metavar="URL", help="where to push")
    r.add_argument(
        "--tier",
        nargs=2,
        action="append",
        required=True,
        metavar=("NAME", "DIR"),
        help="a tier and its model directory, as its weight-sync Job's --target (repeatable)",
    )
    r.add_argument(
        "--reload",
        nargs=2,
        action="append",
        default=[],
        metavar=("NAME", "API"),
        help="the tier's engines reload with API: push what they serve too (repeatable)",
    )
    r.add_argument(
        "--label",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="grouping label of the pushed metrics besides tier (repeatable)",
    )
    add_format_option(r)
    r.set_defaults(func=_lazy("cmd_report"))
