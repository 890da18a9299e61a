"""The one check of an http(s) URL, shared by the spec (a located error at compile time)
and the weight-sync Job (before it touches anything): what one accepts, the other does."""

from __future__ import annotations

import urllib.parse


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
