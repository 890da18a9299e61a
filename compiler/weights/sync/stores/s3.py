"""Publish straight into an S3 bucket: ``standbyc weights publish DIR --to s3://B/P``.

The publish runs as for a directory, into a local cache of the store (``--cache``); this
module is its ``StoreWriter``:

- ``prepare`` reads the store's ``index.json`` and its ETag, checks it as a reader would
  and puts it in the cache; fetches the latest generation's manifest and its small other
  files (for patches); keeps the cached anchor of the latest generation only if every file
  has the index's size and sha256, so the delta is made against its bytes; a cache that
  lacks it (a fresh CI runner) downloads it, resumable and verified, unless
  ``--no-fetch-base`` (then the delta is made against the manifest: bigger).
  A bucket prefix without an index that holds objects is refused.
- ``commit`` uploads every file the new index names and the old one does not (data
  first), each created with ``If-None-Match: *`` and its sha256 as metadata, so an object
  already there with that content is kept (a rerun); those with other content (another
  publisher's, or left by a publish that stopped) are all named before anything is uploaded,
  and the publish stops (exit 7: publishing again does not clear them). Files over
  ``--part-size`` go up in parts; the upload's id is kept in the cache, so a rerun after a
  kill lists the parts already there and sends only the others (a part counts if its size
  and MD5 ETag match). Then ``index.json`` is written
  with ``If-Match`` on the ETag read at the start (``If-None-Match: *`` for a new store):
  of two publishers only one can replace it; the other's own objects are deleted and it
  exits 6. Last, the objects only the old index named are deleted.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import shutil
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from compiler.weights.sync.errors import (
    PublishBlocked,
    PublishRaced,
    SourceUnreachable,
    StoreError,
)
from compiler.weights.sync.fetch import Fetcher
from compiler.weights.sync.index import INDEX, INDEX_CAP, Index, StoredFile, parse_index
from compiler.weights.sync.merge_policy import merge_chain
from compiler.weights.sync.patch import PATCH_CAP
from compiler.weights.sync.ratelimit import TokenBucket
from compiler.weights.sync.s3access import S3Access
from compiler.weights.sync.stores import TOPS, refuse_orphans
from compiler.weights.sync.stores.directory import write_atomic

MIB = 1 << 20
MIN_PART = 5 * MIB  # S3's smallest part (but the last)
MAX_PART = 512 * MIB  # a part is read into memory before it is sent
MAX_PARTS = 10_000  # S3's most parts per upload
UPLOADS = ".standbyc-uploads.json"  # the cache's record of multipart uploads under way
DOWNLOADS = ".standbyc-downloads"  # partial downloads of the latest anchor (--fetch-base)
DENIED = {"AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken",
          "InvalidToken", "AllAccessDisabled", "XAdminUserNotFound", "403", "401"}  # fmt: skip
RACED = {"PreconditionFailed", "412", "ConditionalRequestConflict", "409"}
NOT_FOUND = {"NoSuchKey", "404", "NotFound"}


@dataclass
class UploadStats:
    objects: int = 0  # created by this run
    bytes_sent: int = 0
    resumed_bytes: int = 0  # parts a killed run had sent, not sent again
    kept: int = 0  # already in the bucket with the same content
    base_bytes: int = 0  # the latest anchor, downloaded for the delta (--fetch-base)
    chain_bytes: int = 0  # one-step deltas downloaded for merging (the cache lacked them)

    def to_json(self) -> dict[str, int]:
        return {"uploaded_objects": self.objects, "uploaded_bytes": self.bytes_sent,
                "upload_resumed_bytes": self.resumed_bytes, "objects_kept": self.kept,
                "base_downloaded_bytes": self.base_bytes,
                "chain_downloaded_bytes": self.chain_bytes}  # fmt: skip


def client_error(exc: Exception) -> str:
    """The S3 error code of a botocore ClientError ('' for another error)."""
    response: Any = getattr(exc, "response", None) or {}
    return str(response.get("Error", {}).get("Code", ""))


@dataclass
class S3Store:
    """The ``StoreWriter`` of a store in a bucket."""

    access: S3Access
    part_size: int = 64 * MIB
    rate_bits_per_second: float | None = None
    stats: UploadStats = field(default_factory=UploadStats)
    etag: str | None = None  # the index's ETag when it was read; None: there was none
    fetch_base: bool = True  # download the latest anchor when the cache lacks it
    # One-step deltas back from the latest that merging reads (``merge_policy``): kept in the
    # cache, and downloaded when it lacks them (0: merging is off).
    merge_window: int = 0
    notice: Callable[[str], None] | None = None  # told what a long wait is for

    def __post_init__(self) -> None:
        if not MIN_PART <= self.part_size <= MAX_PART:
            raise StoreError(f"--part-size {self.part_size}: from 5 MiB to 512 MiB")
        config = Config(
            s3={"addressing_style": "path" if self.access.endpoint else "auto"},
            retries={"mode": "standard", "max_attempts": 8},
            # MD5 ETags identify the parts a killed upload sent; no extra checksums asked.
            request_checksum_calculation="when_required",
            response_checksum_validation="when_required",
        )
        self.client = self.access.session.create_client(
            "s3", region_name=self.access.region, endpoint_url=self.access.endpoint,
            config=config,
        )  # fmt: skip
        self.bucket = TokenBucket(self.rate_bits_per_second)

    # -- calls -----------------------------------------------------------------------------

    def _call(self, what: str, op: Callable[..., Any], **kw: Any) -> Any:
        """One S3 call (botocore retries throttling, 5xx and resets); its failures as
        standbyc's errors."""
        try:
            return op(Bucket=self.access.url.bucket, **kw)
        except ClientError as exc:
            code = client_error(exc)
            if code in DENIED:
                raise self.access.denied(403, f"<Code>{code}</Code>".encode()) from None
            if code in RACED or code in NOT_FOUND:
                raise
            raise StoreError(f"{self.access.url}: {what}: {exc}") from None
        except BotoCoreError as exc:
            raise SourceUnreachable(f"{self.access.url}: {what}: {exc}") from None

    def _head(self, rel: str) -> dict[str, Any] | None:
        try:
            head: dict[str, Any] = self._call(rel, self.client.head_object,
                                              Key=self.access.url.key(rel))  # fmt: skip
        except ClientError:
            return None  # 404 (the other codes are raised as themselves)
        return head

    def _get(self, rel: str, cap: int) -> tuple[bytes, str] | None:
        """A small object and its ETag, or None if there is none."""
        try:
            got = self._call(rel, self.client.get_object, Key=self.access.url.key(rel))
        except ClientError:
            return None
        if not 0 <= int(got.get("ContentLength", 0)) <= cap:
            raise StoreError(f"{self.access.url}{rel}: larger than {cap} bytes")
        return got["Body"].read(cap + 1), str(got.get("ETag", ""))

    # -- prepare ---------------------------------------------------------------------------

    def prepare(self, store: Path) -> None:
        got = self._get(INDEX, INDEX_CAP)
        if got is None:
            listed = self._call("list", self.client.list_objects_v2,
                                Prefix=self.access.url.prefix, MaxKeys=1)  # fmt: skip
            refuse_orphans(str(self.access.url), [o["Key"] for o in listed.get("Contents", [])])
            self.etag = None
            for top in (*TOPS, INDEX):  # a cache of another store, or of a lost one
                shutil.rmtree(store / top, ignore_errors=True)
                (store / top).unlink(missing_ok=True)
            return
        data, self.etag = got
        index = parse_index(data, f"{self.access.url}{INDEX}")
        write_atomic(store / INDEX, data)
        latest = index.generations[index.latest]
        self._fetch_small(store, latest.manifest, INDEX_CAP)
        for f in latest.files:
            if f.size <= PATCH_CAP:
                self._fetch_small(store, f.stored, PATCH_CAP)
        if not all(_has(store, f) for f in latest.anchor):
            shutil.rmtree(store / "anchors" / str(latest.number), ignore_errors=True)
            if self.fetch_base:
                if self.notice is not None:
                    self.notice(
                        f"{self.access.url}: the cache {store} lacks generation "
                        f"{latest.number}'s weights; downloading them ({latest.anchor_size} "
                        "bytes) for a small delta (--no-fetch-base: none, and a bigger delta)"
                    )
                self.stats.base_bytes += self._fetch(store, latest.anchor)
        chain = [f for f in merge_chain(index, self.merge_window) if not _has(store, f)]
        self.stats.chain_bytes += self._fetch(store, chain)

    def _fetch(self, store: Path, files: Sequence[StoredFile]) -> int:
        """``files`` into the cache, by the sync's fetcher (resumable, verified); their
        bytes."""
        if not files:
            return 0
        fetcher = Fetcher(self.access.http_base, self.rate_bits_per_second, s3=self.access,
                          notice=self.notice)  # fmt: skip
        downloads = store / DOWNLOADS
        try:
            for f in files:
                got = fetcher.download(f, downloads)
                (store / f.path).parent.mkdir(parents=True, exist_ok=True)
                got.replace(store / f.path)
        finally:
            fetcher.close()
        shutil.rmtree(downloads, ignore_errors=True)
        return sum(f.size for f in files)

    def _fetch_small(self, store: Path, f: StoredFile, cap: int) -> None:
        if _has(store, f):
            return
        got = self._get(f.path, cap)
        data = got[0] if got is not None else b""
        if got is None or len(data) != f.size or hashlib.sha256(data).hexdigest() != f.sha256:
            raise StoreError(
                f"{self.access.url}{f.path}: missing, or not the {f.size} bytes with sha256 "
                f"{f.sha256} the index gives"
            )
        write_atomic(store / f.path, data)

    # -- commit ----------------------------------------------------------------------------

    def commit(self, store: Path, old: Index | None, new: Index, data: bytes) -> list[str]:
        before = _listed(old)
        after = _listed(new)
        created: dict[str, str] = {}
        # Small files first, the anchors (the bulk) last.
        order = sorted(set(after) - set(before), key=lambda p: (p.startswith("anchors/"), p))
        there = self._there(order, after, new.latest)
        try:
            for rel in order:
                if rel in there:
                    self.stats.kept += 1
                    continue
                etag = self._upload(store, after[rel], new.latest)
                if etag is not None:
                    created[rel] = etag
        except (PublishRaced, PublishBlocked):
            self._undo(created)
            raise
        self._put_index(store, data, created)
        gone = sorted(set(before) - set(after))
        for start in range(0, len(gone), 1000):
            batch = [{"Key": self.access.url.key(rel)} for rel in gone[start : start + 1000]]
            self._call("delete", self.client.delete_objects,
                       Delete={"Objects": batch, "Quiet": True})  # fmt: skip
        write_atomic(store / INDEX, data)
        _trim_cache(store, new, self.merge_window)
        return gone

    def _there(self, order: list[str], files: dict[str, StoredFile], generation: int) -> set[str]:
        """The objects already in the bucket with this content (a rerun's); before anything
        is uploaded, every one with other content, named at once (PublishBlocked)."""
        same, taken = set(), []
        for rel in order:
            head = self._head(rel)
            if head is None:
                continue
            f = files[rel]
            if head.get("Metadata", {}).get("sha256") == f.sha256 and (
                head.get("ContentLength") == f.size
            ):
                same.add(rel)
            else:
                taken.append(rel)
        if taken:
            raise self._blocked(taken, generation)
        return same

    def _put_index(self, store: Path, data: bytes, created: dict[str, str]) -> None:
        cond = {"IfMatch": self.etag} if self.etag is not None else {"IfNoneMatch": "*"}
        try:
            self._call(INDEX, self.client.put_object, Key=self.access.url.key(INDEX),
                       Body=data, ContentType="application/json", **cond)  # fmt: skip
        except ClientError as exc:
            if client_error(exc) not in RACED:
                raise
            self._undo(created)
            raise PublishRaced(
                f"{self.access.url}{INDEX}: another publish replaced the index after this one "
                "read it; this publish's objects were removed and the store is as the other "
                "left it. Publish again: it starts from the new index"
            ) from None

    def _undo(self, created: dict[str, str]) -> None:
        """Delete what this run created, unless the index that won names it."""
        got = self._get(INDEX, INDEX_CAP)
        named = set(_listed(parse_index(got[0], INDEX))) if got is not None else set()
        for rel in sorted(set(created) - named):
            self._call(rel, self.client.delete_object, Key=self.access.url.key(rel))

    def _upload(self, store: Path, f: StoredFile, generation: int) -> str | None:
        """Put ``f``, created only if absent; its ETag."""
        path = store / f.path
        if not path.is_file() or path.stat().st_size != f.size:
            raise StoreError(f"{path}: the cache lost a file this publish wrote; publish again")
        try:
            if f.size <= self.part_size:
                body = self._read(path, 0, f.size)
                got = self._call(f.path, self.client.put_object, Key=self.access.url.key(f.path),
                                 Body=body, Metadata={"sha256": f.sha256},
                                 IfNoneMatch="*")  # fmt: skip
                etag = str(got.get("ETag", ""))
            else:
                etag = self._multipart(store, path, f)
        except ClientError as exc:
            if client_error(exc) in RACED:  # created since it was looked at: another publish
                raise self._blocked([f.path], generation) from None
            raise
        self.stats.objects += 1
        return etag

    def _blocked(self, taken: list[str], generation: int) -> PublishBlocked:
        url = self.access.url
        listed = " ".join(f"{url}{rel}" for rel in taken[:8])
        more = f" and {len(taken) - 8} more" if len(taken) > 8 else ""
        return PublishBlocked(
            f"{url}: {len(taken)} object(s) of generation {generation} are already there with "
            f"other content, and the index does not name them: {listed}{more}. A publish of "
            f"generation {generation} that stopped left them, or one is still running. "
            "Publishing again does not clear them: publish the next generation number, or, "
            "once no publish of this generation runs, delete them (aws s3 rm URL for each) "
            "and publish again"
        )

    def _read(self, path: Path, offset: int, size: int) -> bytes:
        """``size`` bytes of ``path`` from ``offset``, after the rate limit let them go."""
        with path.open("rb") as fh:
            fh.seek(offset)
            data = fh.read(size)
        if len(data) != size:
            raise StoreError(f"{path}: shorter than the {offset + size} bytes it had")
        self.bucket.take(size)
        self.stats.bytes_sent += size
        return data

    def _multipart(self, store: Path, path: Path, f: StoredFile) -> str:
        key = self.access.url.key(f.path)
        part = max(self.part_size, math.ceil(f.size / MAX_PARTS / MIB) * MIB)
        uploads = _Uploads(store / UPLOADS)
        upload_id, sent = uploads.get(key, f.sha256, part), {}
        if upload_id is not None:
            try:
                sent = self._parts(key, upload_id)
            except ClientError:  # NoSuchUpload: aborted, or completed by the killed run
                upload_id = None
        if upload_id is None:
            made = self._call(f.path, self.client.create_multipart_upload, Key=key,
                              Metadata={"sha256": f.sha256})  # fmt: skip
            upload_id = str(made["UploadId"])
            uploads.put(key, f.sha256, part, upload_id)
        done = []
        for number, offset in enumerate(range(0, f.size, part), start=1):
            size = min(part, f.size - offset)
            etag = self._send_part(path, key, upload_id, number, offset=offset, size=size,
                                   there=sent.get(number))  # fmt: skip
            done.append({"PartNumber": number, "ETag": etag})
        got = self._call(f.path, self.client.complete_multipart_upload, Key=key,
                         UploadId=upload_id, MultipartUpload={"Parts": done},
                         IfNoneMatch="*")  # fmt: skip
        uploads.drop(key)
        return str(got.get("ETag", ""))

    def _send_part(
        self, path: Path, key: str, upload_id: str, number: int, *, offset: int, size: int,
        there: tuple[int, str] | None,
    ) -> str:  # fmt: skip
        if there is not None and there[0] == size:
            with path.open("rb") as fh:
                fh.seek(offset)
                md5 = hashlib.md5(fh.read(size), usedforsecurity=False).hexdigest()
            if there[1].strip('"') == md5:
                self.stats.resumed_bytes += size
                return there[1]
        body = self._read(path, offset, size)
        got = self._call(key, self.client.upload_part, Key=key, UploadId=upload_id,
                         PartNumber=number, Body=body)  # fmt: skip
        return str(got["ETag"])

    def _parts(self, key: str, upload_id: str) -> dict[int, tuple[int, str]]:
        out: dict[int, tuple[int, str]] = {}
        marker = 0
        for _ in range(MAX_PARTS):
            got = self._call(key, self.client.list_parts, Key=key, UploadId=upload_id,
                             PartNumberMarker=marker)  # fmt: skip
            for p in got.get("Parts", []):
                number, size = int(p["PartNumber"]), int(p["Size"])
                if 1 <= number <= MAX_PARTS and 0 <= size <= MAX_PART:
                    out[number] = (size, str(p["ETag"]))
            if not got.get("IsTruncated"):
                break
            marker = int(got.get("NextPartNumberMarker", 0))
        return out


def _listed(index: Index | None) -> dict[str, StoredFile]:
    if index is None:
        return {}
    return {f.path: f for g in index.generations.values() for f in g.stored()}


def _has(store: Path, f: StoredFile) -> bool:
    """Whether the cache holds ``f`` with the index's size and sha256."""
    path = store / f.path
    if not path.is_file() or path.stat().st_size != f.size:
        return False
    h = hashlib.sha256()
    with path.open("rb") as fh:
        while block := fh.read(8 * MIB):
            h.update(block)
    return h.hexdigest() == f.sha256


def _trim_cache(store: Path, index: Index, merge_window: int) -> None:
    """Keep in the cache only what the next publish reads: the index, the latest
    generation's anchor and small files, and the one-step deltas merging reads; the rest
    is in the bucket."""
    latest = index.generations[index.latest]
    keep = {f.path for f in latest.anchor} | {f.stored.path for f in latest.files}
    keep |= {f.path for f in merge_chain(index, merge_window)}
    for path in _files(store):
        if path.relative_to(store).as_posix() not in keep:
            path.unlink()


def _files(store: Path) -> Iterator[Path]:
    for top in TOPS:
        if (store / top).is_dir():
            yield from (p for p in (store / top).rglob("*") if p.is_file())


class _Uploads:
    """The cache's record of multipart uploads under way: key -> id, content and part
    size, so a rerun resumes the upload its killed run began."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            doc = json.loads(path.read_text())
        except (OSError, ValueError):
            doc = {}
        self.doc: dict[str, Any] = doc if isinstance(doc, dict) else {}

    def get(self, key: str, sha256: str, part: int) -> str | None:
        entry = self.doc.get(key)
        if (
            not isinstance(entry, dict)
            or entry.get("sha256") != sha256
            or entry.get("part") != part
        ):
            return None
        upload_id = entry.get("id")
        return upload_id if isinstance(upload_id, str) and 0 < len(upload_id) < 1024 else None

    def put(self, key: str, sha256: str, part: int, upload_id: str) -> None:
        self.doc[key] = {"sha256": sha256, "part": part, "id": upload_id}
        self._save()

    def drop(self, key: str) -> None:
        self.doc.pop(key, None)
        self._save()

    def _save(self) -> None:
        write_atomic(self.path, json.dumps(self.doc, sort_keys=True).encode())


def default_cache(access: S3Access) -> Path:
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "standbyc" / "publish" / access.url.bucket / access.url.prefix
