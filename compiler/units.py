"""Units, parsed once and kept as integers.

Bandwidths become bit/s, sizes become bytes, durations become milliseconds.
A lowercase ``b`` means bits and an uppercase ``B`` means bytes, always; a
bare number is refused because its unit would be a guess.
"""

from __future__ import annotations

import math
import re
from fractions import Fraction

DECIMAL = {"": 1, "k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
BINARY = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50}
PREFIXES = {**DECIMAL, **BINARY}

_NUMBER = r"(?P<num>[0-9]+(?:\.[0-9]+)?)"
_PREFIX = r"(?P<prefix>Ki|Mi|Gi|Ti|Pi|k|K|M|G|T|P)?"
_BANDWIDTH_UNITS = r"(?P<unit>bit/s|bps|b/s|B/s|Bps|byte/s)"
_SIZE_UNITS = r"(?P<unit>B|bytes?)"
_SIZE_BIT_UNITS = r"(?P<unit>B|bytes?|bit|b)"  # parsed only to say that sizes are in bytes
_BANDWIDTH = rf"{_NUMBER}\s*{_PREFIX}{_BANDWIDTH_UNITS}"
_SIZE = rf"{_NUMBER}\s*{_PREFIX}{_SIZE_UNITS}"
_DURATION = r"(?:[0-9]+(?:ms|s|m|h|d))+"
_PERCENT = r"(?P<num>[0-9]+(?:\.[0-9]+)?)%"
_BANDWIDTH_RE = re.compile(rf"^{_BANDWIDTH}$")
_SIZE_RE = re.compile(rf"^{_NUMBER}\s*{_PREFIX}{_SIZE_BIT_UNITS}$")
_DURATION_PART = re.compile(r"([0-9]+)(ms|s|m|h|d)")
_DURATION_RE = re.compile(rf"^{_DURATION}$")
_PERCENT_RE = re.compile(rf"^{_PERCENT}$")


def _ecma(pattern: str) -> str:
    """A JSON Schema pattern for what a parser below accepts: the same regex, without its
    group names (which ECMA-262 and Python spell differently), and with the surrounding
    whitespace the parsers strip."""
    return "^\\s*" + re.sub(r"\(\?P<\w+>", "(", pattern) + "\\s*$"


# The editor schema's patterns, from the very regexes the parsers use.
BANDWIDTH_PATTERN = _ecma(_BANDWIDTH)
SIZE_PATTERN = _ecma(_SIZE)
DURATION_PATTERN = _ecma(_DURATION)
PERCENT_PATTERN = _ecma(_PERCENT)

# Upper bounds: far beyond any real deployment, low enough that every derived number
# (test series, plan, summary) stays finite and exact.
MAX_BANDWIDTH = 10**15  # 1 Pbit/s
MAX_SIZE = 2**50  # 1 PiB
MAX_DURATION_MS = 366 * 86_400_000  # a year

DURATION_MS = {"ms": 1, "s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}

BANDWIDTH_HELP = "write a number and a unit such as 25Gbit/s, 25Gbps or 3GB/s (b = bits, B = bytes)"
SIZE_HELP = "write a number and a byte unit such as 14GiB, 512MB or 2KiB"
DURATION_HELP = "write a duration such as 300ms, 60s, 5m or 1h30m"


class UnitError(ValueError):
    """A value with a missing or unknown unit; the message says what is accepted."""


def _cut(text: str) -> str:
    """A value as an error message quotes it: long ones shortened."""
    return repr(text if len(text) <= 40 else text[:20] + "..." + text[-12:])


def _scaled(num: str, prefix: str | None) -> Fraction:
    return Fraction(num) * PREFIXES[prefix or ""]


def parse_bandwidth(text: object) -> int:
    """Parse ``25Gbit/s`` (or ``25Gbps``, ``3GB/s``) into bits per second."""
    if isinstance(text, bool) or not isinstance(text, str):
        raise UnitError(f"expected a bandwidth string, got {text!r}; {BANDWIDTH_HELP}")
    match = _BANDWIDTH_RE.match(text.strip())
    if match is None:
        raise UnitError(f"cannot parse bandwidth {text!r}; {BANDWIDTH_HELP}")
    value = _scaled(match["num"], match["prefix"])
    if match["unit"] in ("B/s", "Bps", "byte/s"):
        value *= 8
    if value.denominator != 1:
        raise UnitError(f"bandwidth {text!r} is not a whole number of bit/s")
    if value <= 0:
        raise UnitError(f"bandwidth {text!r} must be greater than zero")
    if value > MAX_BANDWIDTH:
        raise UnitError(f"bandwidth {_cut(text)} is over the maximum, 1 Pbit/s")
    return int(value)


def in_bytes(text: object) -> bool:
    """Whether a bandwidth is written with a byte unit (``3GB/s``): valid, but network
    bandwidths are nearly always meant in bits, so a ``B`` is worth a second look."""
    match = _BANDWIDTH_RE.match(text.strip()) if isinstance(text, str) else None
    return match is not None and match["unit"] in ("B/s", "Bps", "byte/s")


def parse_size(text: object) -> int:
    """Parse ``14GiB`` into bytes."""
    if isinstance(text, bool) or not isinstance(text, str):
        raise UnitError(f"expected a size string, got {text!r}; {SIZE_HELP}")
    match = _SIZE_RE.match(text.strip())
    if match is None:
        raise UnitError(f"cannot parse size {text!r}; {SIZE_HELP}")
    if match["unit"] in ("bit", "b"):
        raise UnitError(f"size {text!r} is in bits; sizes are in bytes ({SIZE_HELP})")
    value = _scaled(match["num"], match["prefix"])
    if value.denominator != 1:
        raise UnitError(f"size {text!r} is not a whole number of bytes")
    if value <= 0:
        raise UnitError(f"size {text!r} must be greater than zero")
    if value > MAX_SIZE:
        raise UnitError(f"size {_cut(text)} is over the maximum, 1 PiB")
    return int(value)


def parse_duration(text: object) -> int:
    """Parse ``5m`` or ``1h30m`` into milliseconds."""
    if isinstance(text, bool) or not isinstance(text, str):
        raise UnitError(f"expected a duration string, got {text!r}; {DURATION_HELP}")
    compact = text.strip()
    if not _DURATION_RE.match(compact):
        raise UnitError(f"cannot parse duration {text!r}; {DURATION_HELP}")
    parts = _DURATION_PART.findall(compact)
    if any(len(n) > 12 for n, _ in parts):
        raise UnitError(f"duration {_cut(compact)} is over the maximum, a year")
    total = sum(int(n) * DURATION_MS[u] for n, u in parts)
    if total <= 0:
        raise UnitError(f"duration {text!r} must be greater than zero")
    if total > MAX_DURATION_MS:
        raise UnitError(f"duration {_cut(compact)} is over the maximum, a year")
    return total


def parse_ratio(text: object) -> Fraction:
    """Parse ``50%`` into a fraction in (0, 1]."""
    if isinstance(text, bool) or not isinstance(text, str):
        raise UnitError(f"expected a percentage such as 50%, got {text!r}")
    match = _PERCENT_RE.match(text.strip())
    if match is None:
        raise UnitError(f"cannot parse percentage {text!r}; write it like 50% or 2.5%")
    value = Fraction(match["num"]) / 100
    if not 0 < value <= 1:
        raise UnitError(f"percentage {text!r} must be above 0% and at most 100%")
    return value


# --- formatting -------------------------------------------------------------


def exact_size(value: int) -> str:
    """A size as a user writes it, exactly: ``14GiB``, ``2KiB``, ``512B``."""
    for suffix in ("PiB", "TiB", "GiB", "MiB", "KiB"):
        factor = BINARY[suffix[:-1]]
        if value % factor == 0:
            return f"{value // factor}{suffix}"
    return f"{value}B"


def k8s_quantity(value: int) -> str:
    """A Kubernetes quantity for an integer, with the largest exact decimal suffix.

    Cilium reads kubernetes.io/egress-bandwidth as a quantity in bit/s; ``25G``
    parses, ``25Gbps`` does not (and then no limit is applied at all).
    """
    for suffix, factor in (
        ("E", 10**18),
        ("P", 10**15),
        ("T", 10**12),
        ("G", 10**9),
        ("M", 10**6),
        ("k", 10**3),
    ):
        if value % factor == 0:
            return f"{value // factor}{suffix}"
    return str(value)


def _human(value: float, units: tuple[str, ...], base: int) -> str:
    index = 0
    while abs(value) >= base and index < len(units) - 1:
        value /= base
        index += 1
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{text} {units[index]}"


def human_bits(bits_per_second: float) -> str:
    return _human(bits_per_second, ("bit/s", "kbit/s", "Mbit/s", "Gbit/s", "Tbit/s"), 1000)


def human_bytes(n: float) -> str:
    return _human(n, ("B", "KiB", "MiB", "GiB", "TiB"), 1024)


def human_bytes_per_second(n: float) -> str:
    return _human(n, ("B/s", "kB/s", "MB/s", "GB/s", "TB/s"), 1000)


def prom_duration(ms: int) -> str:
    """A Prometheus duration string (``5m``, ``90s``, ``1h30m``) for milliseconds."""
    if ms % 1000:
        return f"{ms}ms"
    out = ""
    rest = ms // 1000
    for unit, seconds in (("d", 86400), ("h", 3600), ("m", 60), ("s", 1)):
        if rest >= seconds:
            out += f"{rest // seconds}{unit}"
            rest %= seconds
    return out


def human_seconds(seconds: float) -> str:
    if seconds < 1:
        return f"{seconds * 1000:.1f} ms"
    if seconds < 120:
        return f"{seconds:.2f} s"
    return f"{seconds / 60:.1f} min"


def float_literal(value: float) -> str:
    """A PromQL/JSON number literal that round-trips exactly for integers."""
    if math.isfinite(value) and float(value).is_integer() and abs(value) < 1e21:
        return str(int(value))
    return repr(float(value))
