"""The one check of an http(s) or s3:// URL, shared by the spec (a located error at compile
time) and the weight-sync Job (before it touches anything): what one accepts, the other
does."""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass


def http_url(value: str) -> urllib.parse.SplitResult:
    """``value`` split, if it is an http(s) URL with a host and a valid port; else
    ValueError saying why."""
    try:
        parts = urllib.parse.urlsplit(value)
        parts.port  # noqa: B018 - raises on a port out of range or not a number
    except ValueError as exc:
        raise ValueError(f"{value!r} is not a valid URL: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http:// or https:// URL with a host")
    return parts


S3_SCHEME = "s3://"
# S3's bucket naming rules (3 to 63 of lowercase letters, digits, '.', '-'; a letter or
# digit at both ends). A key prefix is the store's own key syntax plus '/'.
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_PREFIX = re.compile(r"(?:[A-Za-z0-9._-]+/)*")


def is_s3(url: str) -> bool:
    return url.startswith(S3_SCHEME)


@dataclass(frozen=True)
class S3Url:
    bucket: str
    prefix: str  # "" or ending in "/"

    @classmethod
    def parse(cls, url: str) -> S3Url:
        """``s3://bucket`` or ``s3://bucket/prefix/``; ValueError saying what is wrong."""
        if not is_s3(url):
            raise ValueError(f"{url!r} is not an s3:// URL")
        bucket, _, prefix = url[len(S3_SCHEME) :].partition("/")
        if not _BUCKET.fullmatch(bucket) or ".." in bucket:
            raise ValueError(
                f"{url!r}: {bucket!r} is not an S3 bucket name (3 to 63 lowercase letters, "
                "digits, '.' and '-')"
            )
        if prefix and not prefix.endswith("/"):
            prefix += "/"
        if not _PREFIX.fullmatch(prefix) or any(p in (".", "..") for p in prefix.split("/")):
            raise ValueError(
                f"{url!r}: the key prefix may hold only letters, digits, '.', '_', '-' and '/' "
                "(no empty, '.' or '..' parts)"
            )
        return cls(bucket, prefix)

    def __str__(self) -> str:
        return f"{S3_SCHEME}{self.bucket}/{self.prefix}"

    def key(self, rel: str) -> str:
        return self.prefix + rel
