"""Go's `time.ParseDuration` and `time.Duration.String`, for healthcheck durations (the state
holds them as Go formats them: "1m30s", "500ms", "0s").

    parse("1m30s") == 90_000_000_000
    format(90_000_000_000) == "1m30s"
"""

from __future__ import annotations

import re
from decimal import Decimal

_UNITS = {
    "ns": 1,
    "us": 1_000,
    "µs": 1_000,
    "μs": 1_000,
    "ms": 1_000_000,
    "s": 1_000_000_000,
    "m": 60_000_000_000,
    "h": 3_600_000_000_000,
}
_PART = re.compile(r"(\d+\.?\d*|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse(text: str) -> int:
    """Nanoseconds of a Go duration string; ValueError if it is not one."""
    sign = -1 if text.startswith("-") else 1
    body = text.lstrip("+-")
    if body == "0":
        return 0
    if not body:
        raise ValueError(f"invalid duration {text!r}")
    total, pos = Decimal(0), 0
    for match in _PART.finditer(body):
        if match.start() != pos:
            raise ValueError(f"invalid duration {text!r}")
        total += Decimal(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    if pos != len(body):
        raise ValueError(f"invalid duration {text!r}")
    return sign * int(total)


def _fraction(value: int, scale: int) -> str:
    whole, rest = divmod(value, scale)
    if rest == 0:
        return str(whole)
    digits = len(str(scale)) - 1
    return f"{whole}.{rest:0{digits}d}".rstrip("0")


def format(nanoseconds: int) -> str:
    """Go's Duration.String()."""
    if nanoseconds == 0:
        return "0s"
    sign = "-" if nanoseconds < 0 else ""
    n = abs(int(nanoseconds))
    if n < 1_000:
        return f"{sign}{n}ns"
    if n < 1_000_000:
        return f"{sign}{_fraction(n, 1_000)}µs"
    if n < 1_000_000_000:
        return f"{sign}{_fraction(n, 1_000_000)}ms"
    hours, rest = divmod(n, 3_600_000_000_000)
    minutes, rest = divmod(rest, 60_000_000_000)
    seconds = _fraction(rest, 1_000_000_000)
    if hours:
        return f"{sign}{hours}h{minutes}m{seconds}s"
    if minutes:
        return f"{sign}{minutes}m{seconds}s"
    return f"{sign}{seconds}s"
