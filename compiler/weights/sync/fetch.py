"""Downloads from the store over HTTP(S): resumable, retried, rate-limited, verified.

- A download goes to ``<name>.part`` in a directory beside the target, with a small
  ``.part.json`` recording what it should become (size, sha256) and the server's ETag.
  After an interruption the next run asks for the rest (``Range: bytes=N-``, with
  ``If-Range`` so a file that changed on the server is fetched again from the start).
- Connection errors, resets, 5xx and 429 are retried with exponential backoff; an
  attempt that received bytes resets the count. After the last retry the store counts
  as unreachable (exit 4).
- Every byte read passes a token bucket in bit/s, so a sync never takes more than its
  share of the link, whatever the server or the network allow.
- A finished file must have the size and sha256 the index gives, or it is deleted.
"""

from __future__ import annotations

import contextlib
import hashlib
import http.client
import json
import os
import random
import ssl
import time
import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from compiler.weights.sync.errors import DownloadCorrupt, SourceUnreachable, StoreError
from compiler.weights.sync.store import StoredFile

READ_SIZE = 1 << 20
HASH_BLOCK = 8 << 20
USER_AGENT = "standbyc-weights-sync"


class TokenBucket:
    """At most ``bits_per_second`` on average; bursts up to ``burst`` bytes.

    The bucket starts empty, so a transfer of N bytes takes at least
    ``(N - burst) / rate`` seconds.
    """

    def __init__(
        self,
        bits_per_second: float | None,
        *,
        burst_seconds: float = 0.05,
        clock: Callable[[], float] = time.monotonic,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.rate = bits_per_second / 8 if bits_per_second else None  # bytes/s
        self.burst = max(64 << 10, int(self.rate * burst_seconds)) if self.rate else READ_SIZE
        self.tokens = 0.0
        self.clock, self.sleep = clock, sleep
        self.last = clock()

    @property
    def read_size(self) -> int:
        return min(READ_SIZE, self.burst)

    def take(self, nbytes: int) -> None:
        if self.rate is None:
            return
        now = self.clock()
        self.tokens = min(self.burst, self.tokens + (now - self.last) * self.rate)
        self.last = now
        self.tokens -= nbytes
        if self.tokens < 0:
            self.sleep(-self.tokens / self.rate)


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


class NotFound(Exception):
    """The store answered 404: the file is gone (pruned after the index was read)."""


class _Transient(Exception):
    """A failure worth retrying (a 5xx, a 429, a reset, a short body)."""


@dataclass
class Fetcher:
    base_url: str
    rate_bits_per_second: float | None = None
    retries: int = 8
    backoff: float = 0.5  # seconds before the first retry; doubles each time
    max_backoff: float = 30.0
    timeout: float = 30.0
    progress: Callable[[int], None] | None = None
    stats: FetchStats = field(default_factory=FetchStats)
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
        url = urllib.parse.urlsplit(self.base_url)
        if url.scheme not in ("http", "https") or not url.hostname:
            raise StoreError(f"{self.base_url}: the store URL must be http:// or https://")
        self._url = url
        self._prefix = url.path if url.path.endswith("/") else url.path + "/"
        self._conn: http.client.HTTPConnection | None = None
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

    def _get(self, path: str, headers: dict[str, str]) -> http.client.HTTPResponse:
        conn = self._connection()
        self.stats.requests += 1
        target = self._prefix + urllib.parse.quote(path)
        conn.request("GET", target, headers={"User-Agent": USER_AGENT, **headers})
        resp = conn.getresponse()
        if resp.status >= 500 or resp.status == 429:
            resp.read()
            raise _Transient(f"HTTP {resp.status} {resp.reason}")
        if resp.status == 404:
            resp.read()
            raise NotFound(self.url(path))
        if resp.status not in (200, 206, 416):
            resp.read()
            raise SourceUnreachable(f"{self.url(path)}: HTTP {resp.status} {resp.reason}")
        return resp

    def _retrying(self, what: str, attempt: Callable[[], bool]) -> None:
        """Run ``attempt`` until it returns True; it returns False to be retried at once
        (progress was made) and raises to be retried after a backoff."""
        failures = 0
        while True:
            try:
                if attempt():
                    return
                failures = 0
                continue
            except (_Transient, OSError, http.client.HTTPException) as exc:
                self.close()
                failures += 1
                if failures > self.retries:
                    raise SourceUnreachable(
                        f"{what}: the store did not answer after {self.retries} retries "
                        f"(last error: {exc})"
                    ) from None
                self.stats.retries += 1
                delay = min(self.max_backoff, self.backoff * 2 ** (failures - 1))
                self.sleep(delay * (0.5 + random.random() / 2))  # jitter: no thundering herd

    # -- small files ---------------------------------------------------------------------------

    def read(self, path: str, cap: int) -> bytes:
        """A small file (the index, a manifest) into memory, at most ``cap`` bytes."""
        out = bytearray()

        def attempt() -> bool:
            out.clear()
            resp = self._get(path, {})
            if resp.status != 200:
                resp.read()
                raise _Transient(f"HTTP {resp.status} for a plain GET")
            while chunk := resp.read(self.bucket.read_size):
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
        part = final.with_name(final.name + ".part")
        meta_path = final.with_name(final.name + ".part.json")
        want = {"path": f.path, "size": f.size, "sha256": f.sha256}
        if final.is_file() and _sha256_file(final) == f.sha256:
            return final  # downloaded and verified by an earlier run
        meta = _read_json(meta_path)
        if not part.is_file() or {k: meta.get(k) for k in want} != want:
            part.unlink(missing_ok=True)
            meta = dict(want)
            _write_json(meta_path, meta)
        got = _Partial(part)
        self.stats.resumed_bytes += got.size

        def attempt() -> bool:
            start = got.size
            if start >= f.size:
                return True
            headers = {"Range": f"bytes={start}-"} if start else {}
            if start and meta.get("etag"):
                headers["If-Range"] = str(meta["etag"])
            resp = self._get(f.path, headers)
            if resp.status == 416:  # the range is past the end: the file changed, start over
                resp.read()
                got.restart()
                return False
            if resp.status == 200 and start:  # If-Range failed: a whole new body follows
                got.restart()
            elif resp.status == 206 and _range_start(resp) != start:
                resp.read()
                raise _Transient("the server answered another range than asked for")
            if etag := resp.getheader("ETag"):
                meta["etag"] = etag
                _write_json(meta_path, meta)
            received = self._stream(resp, got)
            if got.size < f.size and received == 0:
                raise _Transient("the connection closed before any byte arrived")
            return got.size >= f.size

        self._retrying(self.url(f.path), attempt)
        digest = got.sha.hexdigest()
        if got.size != f.size or digest != f.sha256:
            part.unlink(missing_ok=True)
            meta_path.unlink(missing_ok=True)
            raise DownloadCorrupt(
                f"{self.url(f.path)}: got {got.size} bytes with sha256 {digest}; the index "
                f"says {f.size} bytes with sha256 {f.sha256}"
            )
        part.replace(final)
        meta_path.unlink(missing_ok=True)
        return final

    def _stream(self, resp: http.client.HTTPResponse, got: _Partial) -> int:
        """Append the body to the partial file; return how many bytes arrived (kept even
        when the connection breaks, so the next attempt resumes after them)."""
        received = 0
        with got.path.open("ab") as out:
            try:
                while chunk := resp.read(self.bucket.read_size):
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


class _Partial:
    """A partial download: its bytes so far and their running sha256."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.sha = hashlib.sha256()
        self.size = _hash_prefix(path, self.sha)

    def restart(self) -> None:
        self.path.unlink(missing_ok=True)
        self.sha = hashlib.sha256()
        self.size = 0


def _range_start(resp: http.client.HTTPResponse) -> int | None:
    value = resp.getheader("Content-Range") or ""  # "bytes 100-199/200"
    with contextlib.suppress(ValueError, IndexError):
        return int(value.split(" ", 1)[1].split("-", 1)[0])
    return None


def _hash_prefix(path: Path, hasher: Any) -> int:
    if not path.is_file():
        return 0
    n = 0
    with path.open("rb") as f:
        while block := f.read(HASH_BLOCK):
            hasher.update(block)
            n += len(block)
    return n


def _sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    _hash_prefix(path, h)
    return h.hexdigest()


def _read_json(path: Path) -> dict[str, Any]:
    try:
        doc = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return doc if isinstance(doc, dict) else {}


def _write_json(path: Path, doc: dict[str, Any]) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(doc, sort_keys=True))
    tmp.replace(path)
