"""Downloads from the store over HTTP(S): resumable, retried, rate-limited, verified.

- A download goes to ``<name>.part`` in a directory beside the target, with a small
  ``.part.json`` (``partial``) recording what it should become (size, sha256) and the server's ETag.
  After an interruption the next run asks for the rest (``Range: bytes=N-``, with
  ``If-Range`` so a file that changed on the server is fetched again from the start).
- Connection errors, resets, 5xx and 429 are retried with exponential backoff; an
  attempt that received bytes resets the count. After the last retry the store counts
  as unreachable (exit 4).
- Every request has one deadline for connect and the whole body: ``timeout`` plus its
  bytes at ``min_rate`` (a server that drips is cut off, however each read goes); the
  whole sync has one budget (``deadline``), after which nothing more is asked.
- A body never grows beyond the size the index gives; a 416 or a short file starts over
  once, then the file is refused. A body the server encoded (gzip) is refused.
- A full disk is not the network: the partial file is removed and nothing is retried.
- Every byte read passes a token bucket in bit/s (``ratelimit``), so a sync never takes
  more than its share of the link, whatever the server or the network allow.
- A finished file must have the size and sha256 the index gives, or it is deleted.
- For an ``s3://`` store (``s3access.py``) each request is signed; a 401 or 403 is the
  credentials' fault, not the network's: StoreDenied (exit 2), with the store's answer.
"""

from __future__ import annotations

import contextlib
import errno
import http.client
import math
import os
import random
import ssl
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from compiler.fsutil import open_append
from compiler.urls import http_url
from compiler.weights.errors import DiskFull
from compiler.weights.sync.errors import (
    DownloadCorrupt,
    SourceUnreachable,
    StoreDenied,
    StoreError,
    SyncTimeout,
)
from compiler.weights.sync.index import KeyAbsent, StoredFile
from compiler.weights.sync.partial import Partial, finished, read_meta, regular, write_meta
from compiler.weights.sync.ratelimit import TokenBucket

if TYPE_CHECKING:  # botocore is imported for an s3:// store only
    from compiler.weights.sync.s3access import S3Access

ANSWER_CAP = 64 << 10  # what is read of an error answer's body
USER_AGENT = "standbyc-weights-sync"


@dataclass
class FetchStats:
    bytes_fetched: int = 0  # body bytes received from the store
    requests: int = 0
    retries: int = 0
    resumed_bytes: int = 0  # bytes a resumed download did not fetch again

    def to_json(self) -> dict[str, int]:
        return {
            "bytes_fetched": self.bytes_fetched,
            "requests": self.requests,
            "retries": self.retries,
            "resumed_bytes": self.resumed_bytes,
        }


class NotFound(KeyAbsent):
    """The store answered 404: the file is gone (pruned after the index was read)."""


class _Transient(Exception):
    """A failure worth retrying (a 5xx, a 429, a reset, a short body)."""


class _Late(_Transient):
    """A request ran past its deadline."""


DISK_FULL = (errno.ENOSPC, errno.EDQUOT)
MIN_RATE = 100e6  # bit/s a request's body may not fall below, unless told otherwise
ATTEMPTS_CAP = 1000  # attempts per file, progress or not: a loop always ends


def check_url(url: str, what: str) -> urllib.parse.SplitResult:
    """An http(s) URL with a host and a valid port, or StoreError naming ``what``."""
    try:
        return http_url(url)
    except ValueError as exc:
        raise StoreError(f"{what}: {exc}") from None


@dataclass
class Fetcher:
    base_url: str
    rate_bits_per_second: float | None = None
    retries: int = 8
    backoff: float = 0.5  # seconds before the first retry; doubles each time
    max_backoff: float = 30.0
    timeout: float = 30.0  # connect, and any wait for bytes; a request adds its body's time
    min_rate: float = MIN_RATE  # bit/s: a request's body time is its bytes at this rate
    deadline: float | None = None  # time.monotonic() by which the whole sync must be done
    progress: Callable[[int], None] | None = None
    stats: FetchStats = field(default_factory=FetchStats)
    sleep: Callable[[float], None] = time.sleep
    s3: S3Access | None = None  # signs every request for a private bucket
    notice: Callable[[str], None] | None = None  # told what each wait between tries is for

    def __post_init__(self) -> None:
        url = check_url(self.base_url, "--source")
        self._url = url
        self._prefix = url.path if url.path.endswith("/") else url.path + "/"
        self._conn: http.client.HTTPConnection | None = None
        self._request_deadline = math.inf
        self.bucket = TokenBucket(self.rate_bits_per_second)

    def url(self, path: str) -> str:
        return urllib.parse.urlunsplit(
            (self._url.scheme, self._url.netloc, self._prefix + path, "", "")
        )

    # -- connections -----------------------------------------------------------------------

    def _connection(self) -> http.client.HTTPConnection:
        if self._conn is None:
            host, port = self._url.hostname or "", self._url.port
            if self._url.scheme == "https":
                ctx = ssl.create_default_context()
                self._conn = http.client.HTTPSConnection(
                    host, port, timeout=self.timeout, context=ctx
                )
            else:
                self._conn = http.client.HTTPConnection(host, port, timeout=self.timeout)
        return self._conn

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    def _remaining(self) -> float:
        """Seconds left of the request's deadline and the sync's budget."""
        now = time.monotonic()
        left = self._request_deadline - now
        if self.deadline is not None:
            left = min(left, self.deadline - now)
        return left

    def _check_time(self, what: str) -> None:
        if self.deadline is not None and time.monotonic() >= self.deadline:
            raise SyncTimeout(f"{what}: the sync's budget (--deadline) ran out")
        if time.monotonic() >= self._request_deadline:
            raise _Late("the request ran past its deadline (--timeout and its bytes at --min-rate)")

    def _get(self, path: str, headers: dict[str, str], expected: int) -> http.client.HTTPResponse:
        """One GET, whose connect and whole body must finish within ``timeout`` plus
        ``expected`` bytes at ``min_rate``."""
        self._request_deadline = time.monotonic() + self.timeout + expected * 8 / self.min_rate
        self._check_time(self.url(path))
        conn = self._connection()
        conn.timeout = max(0.001, min(self.timeout, self._remaining()))
        if conn.sock is not None:  # a kept-alive connection: its socket has its own
            conn.sock.settimeout(conn.timeout)
        self.stats.requests += 1
        target = self._prefix + urllib.parse.quote(path)
        headers = {"User-Agent": USER_AGENT, "Accept-Encoding": "identity", **headers}
        if self.s3 is not None:
            headers = self.s3.sign("GET", f"{self._url.scheme}://{self._url.netloc}{target}",
                                   headers)  # fmt: skip
        conn.request("GET", target, headers=headers)
        resp = conn.getresponse()
        encoding = (resp.getheader("Content-Encoding") or "identity").strip().lower()
        if encoding != "identity" and resp.status < 300:
            resp.close()
            raise DownloadCorrupt(
                f"{self.url(path)}: the server sent a {encoding}-encoded body, which standbyc "
                "did not ask for; serve the store's files as they are (no compression)"
            )
        if resp.status in (200, 206, 416):
            return resp
        # An answer that is not the file: a bounded read of it, and a new connection next.
        answer = resp.read(ANSWER_CAP)
        self.close()
        if self.s3 is not None and (refused := self.s3.refused(resp.status, answer)):
            raise refused
        if resp.status >= 500 or resp.status == 429:
            raise _Transient(f"HTTP {resp.status} {resp.reason}")
        if resp.status == 404:
            raise NotFound(self.url(path))
        raise SourceUnreachable(f"{self.url(path)}: HTTP {resp.status} {resp.reason}")

    def _retrying(self, what: str, attempt: Callable[[], bool]) -> None:
        """Run ``attempt`` until it returns True; it returns False to be retried at once
        (progress was made) and raises to be retried after a backoff. Every loop ends: at
        ``retries`` failures in a row, ``ATTEMPTS_CAP`` attempts, or the sync's budget."""
        failures = 0
        for _ in range(ATTEMPTS_CAP):
            try:
                if attempt():
                    return
                failures = 0
                continue
            except (DiskFull, DownloadCorrupt, StoreDenied, SyncTimeout):
                self.close()
                raise
            except OSError as exc:
                if exc.errno in DISK_FULL:
                    self.close()
                    raise DiskFull(f"{what}: {exc.strerror} ({exc.filename})") from None
                failures = self._failed(what, failures, exc)
            except (_Transient, http.client.HTTPException) as exc:
                failures = self._failed(what, failures, exc)
        raise SourceUnreachable(f"{what}: no end after {ATTEMPTS_CAP} attempts")

    def _failed(self, what: str, failures: int, exc: Exception) -> int:
        """Count a failure and back off; raise once there were too many."""
        self.close()
        failures += 1
        if failures > self.retries:
            raise SourceUnreachable(
                f"{what}: the store did not answer after {self.retries} retries "
                f"(last error: {exc or type(exc).__name__})"
            ) from None
        self.stats.retries += 1
        delay = min(self.max_backoff, self.backoff * 2 ** (failures - 1))
        delay *= 0.5 + random.random() / 2  # jitter: no thundering herd
        if self.deadline is not None and time.monotonic() + delay >= self.deadline:
            raise SyncTimeout(f"{what}: the sync's budget (--deadline) ran out (last error: {exc})")
        if self.notice is not None:
            left = "" if self.deadline is None else (
                f"; the budget ends in {self.deadline - time.monotonic():.0f} s (--deadline)"
            )  # fmt: skip
            self.notice(
                f"{what}: {exc or type(exc).__name__}; waiting {delay:.1f} s for retry "
                f"{failures} of {self.retries} (--retries){left}"
            )
        self.sleep(delay)
        return failures

    # -- small files ---------------------------------------------------------------------------

    def read(self, path: str, cap: int) -> bytes:
        """A small file (the index, a manifest) into memory, at most ``cap`` bytes."""
        out = bytearray()

        def attempt() -> bool:
            out.clear()
            resp = self._get(path, {}, min(cap, 1 << 20))
            if resp.status != 200:
                resp.read()
                raise _Transient(f"HTTP {resp.status} for a plain GET")
            while chunk := self._read(resp, self.url(path)):
                self.bucket.take(len(chunk))
                self.stats.bytes_fetched += len(chunk)
                out.extend(chunk)
                if len(out) > cap:
                    raise StoreError(f"{self.url(path)}: larger than {cap} bytes")
            return True

        self._retrying(self.url(path), attempt)
        return bytes(out)

    # -- large files ---------------------------------------------------------------------------

    def download(self, f: StoredFile, into: Path) -> Path:
        """``f`` as a verified file in ``into`` (resuming a partial one); returns its path.

        A file that arrives whole but does not match the index is fetched once more from
        the start; if it still does not match, it is deleted and DownloadCorrupt raised.
        """
        for last in (False, True):
            try:
                return self._download_once(f, into)
            except DownloadCorrupt:
                if last:
                    raise
        raise AssertionError("unreachable")

    def _download_once(self, f: StoredFile, into: Path) -> Path:
        into.mkdir(parents=True, exist_ok=True)
        final = into / f.path.replace("/", "__")
        if finished(final, f.sha256):
            return final  # downloaded and verified by an earlier run
        job = _Download(self, f, final)
        self.stats.resumed_bytes += job.got.size
        try:
            self._retrying(self.url(f.path), job.attempt)
        except (DownloadCorrupt, DiskFull, NotFound):
            job.discard()  # nothing it holds is worth resuming
            raise
        digest = job.got.sha.hexdigest()
        if job.got.size != f.size or digest != f.sha256:
            job.discard()
            raise DownloadCorrupt(
                f"{self.url(f.path)}: got {job.got.size} bytes with sha256 {digest}; the index "
                f"says {f.size} bytes with sha256 {f.sha256}"
            )
        job.got.path.replace(final)
        job.meta_path.unlink(missing_ok=True)
        return final

    def _read(self, resp: http.client.HTTPResponse, what: str) -> bytes:
        """The next bytes of a body (one receive, not a full buffer: a dripping server is
        seen between receives), within the request's deadline and the sync's budget."""
        self._check_time(what)
        if self._conn is not None and self._conn.sock is not None:
            self._conn.sock.settimeout(max(0.001, min(self.timeout, self._remaining())))
        chunk = resp.read1(self.bucket.read_size) if resp.fp else b""
        if not chunk and resp.fp is not None:
            # read1 leaves a response whose last byte it returned open; read() ends it, so
            # the kept-alive connection can carry the next request.
            with contextlib.suppress(http.client.HTTPException, OSError):
                resp.read()
        return chunk

    def _stream(self, resp: http.client.HTTPResponse, got: Partial, size: int, what: str) -> int:
        """Append the body to the partial file, never beyond ``size``; return how many
        bytes arrived (kept even when the connection breaks, so the next attempt resumes
        after them)."""
        received = 0
        with os.fdopen(open_append(got.path), "ab") as out:
            try:
                while chunk := self._read(resp, what):
                    if got.size + len(chunk) > size:
                        resp.close()
                        raise DownloadCorrupt(
                            f"{what}: the body runs past the {size} bytes the index gives"
                        )
                    self.bucket.take(len(chunk))
                    out.write(chunk)
                    got.sha.update(chunk)
                    got.size += len(chunk)
                    received += len(chunk)
                    self.stats.bytes_fetched += len(chunk)
                    if self.progress:
                        self.progress(len(chunk))
            finally:
                out.flush()
                os.fsync(out.fileno())
        return received


class _Download:
    """One file's download: its partial bytes, what they should become, its restarts."""

    def __init__(self, fetcher: Fetcher, f: StoredFile, final: Path) -> None:
        self.fetcher, self.f = fetcher, f
        self.url = fetcher.url(f.path)
        part = final.with_name(final.name + ".part")
        self.meta_path = final.with_name(final.name + ".part.json")
        want = {"path": f.path, "size": f.size, "sha256": f.sha256}
        self.meta = read_meta(self.meta_path)
        if not regular(part) or {k: self.meta.get(k) for k in want} != want:
            part.unlink(missing_ok=True)
            self.meta = dict(want)
            write_meta(self.meta_path, self.meta)
        self.got = Partial(part)
        if self.got.size > f.size:
            self.got.restart()
        self.restarts = 0
        self.best = self.got.size  # the longest the partial file has been

    def discard(self) -> None:
        self.got.path.unlink(missing_ok=True)
        self.meta_path.unlink(missing_ok=True)

    def _restart(self, why: str) -> None:
        """Start over once; the second time the file on the server is not the index's."""
        self.restarts += 1
        if self.restarts > 1:
            raise DownloadCorrupt(
                f"{self.url}: {why} again after starting over; the file on the server is not "
                f"the {self.f.size} bytes the index gives"
            )
        self.got.restart()

    def _check_size(self, resp: http.client.HTTPResponse, start: int) -> None:
        """Refuse at once a body whose announced size is not the index's."""
        total = _range_total(resp) if resp.status == 206 else _body_length(resp)
        if resp.status == 206 and total is None:
            length = _body_length(resp)
            total = None if length is None else start + length
        if total is not None and total != self.f.size:
            resp.close()
            raise DownloadCorrupt(
                f"{self.url}: the server has {total} bytes; the index gives {self.f.size}"
            )

    def attempt(self) -> bool:
        got, f = self.got, self.f
        start = got.size
        if start >= f.size:
            # An empty file has no byte to ask for, and nothing on disk yet to rename.
            got.path.touch(exist_ok=True)
            return True
        headers = {"Range": f"bytes={start}-"} if start else {}
        if start and self.meta.get("etag"):
            headers["If-Range"] = str(self.meta["etag"])
        resp = self.fetcher._get(f.path, headers, f.size - start)
        if resp.status == 416:  # the range is past the end: the file changed, start over
            resp.read(ANSWER_CAP)
            self.fetcher.close()
            self._restart("HTTP 416 (range not satisfiable)")
            return False
        if resp.status == 200 and start:  # If-Range failed: a whole new body follows
            got.restart()
            start = 0
        elif resp.status == 206 and _range_start(resp) != start:
            resp.read(ANSWER_CAP)
            self.fetcher.close()
            raise _Transient("the server answered another range than asked for")
        self._check_size(resp, start)
        if etag := resp.getheader("ETag"):
            self.meta["etag"] = etag
            write_meta(self.meta_path, self.meta)
        try:
            received = self.fetcher._stream(resp, got, f.size, self.url)
        except _Late:
            if self._advanced():
                return False  # it came, if slowly: the next request resumes after it
            raise
        if got.size >= f.size:
            return True
        if received == 0:
            raise _Transient("the connection closed before any byte arrived")
        if not self._advanced():  # a server that sends the same half again and again
            raise _Transient(f"no byte past {self.best} of {f.size} arrived")
        return False

    def _advanced(self) -> bool:
        """Whether the partial file is longer than it ever was: only that is progress."""
        if self.got.size > self.best:
            self.best = self.got.size
            return True
        return False


def _body_length(resp: http.client.HTTPResponse) -> int | None:
    value = resp.getheader("Content-Length")
    with contextlib.suppress(TypeError, ValueError):
        return int(value) if value is not None else None
    return None


def _range_total(resp: http.client.HTTPResponse) -> int | None:
    value = resp.getheader("Content-Range") or ""  # "bytes 100-199/200"
    with contextlib.suppress(ValueError, IndexError):
        total = value.rsplit("/", 1)[1]
        return None if total == "*" else int(total)
    return None


def _range_start(resp: http.client.HTTPResponse) -> int | None:
    value = resp.getheader("Content-Range") or ""  # "bytes 100-199/200"
    with contextlib.suppress(ValueError, IndexError):
        return int(value.split(" ", 1)[1].split("-", 1)[0])
    return None
