"""Durations as Go writes them ("90s", "2m", "1m2.5s"), in kubelet events and flags."""

import math
import re

_GO_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
MAX_SECONDS = (2**63 - 1) / 1e9  # Go's longest time.Duration
_UNIT_SECONDS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


def go_duration(text: str) -> float:
    """Seconds in a Go time.Duration string such as "1m2.5s", "812ms" or "0s"."""
    if text == "0":
        return 0.0
    pos, total = 0, 0.0
    for match in _GO_DURATION_PART.finditer(text):
        if match.start() != pos:
            break
        total += float(match.group(1)) * _UNIT_SECONDS[match.group(2)]
        pos = match.end()
    if pos != len(text) or not text:
        raise ValueError(f"not a Go duration: {text[:60]!r}")
    # Go's Duration tops out at ~292 years; a longer one is not a duration anyone measured
    # (a hostile event message), and +Inf would stay in a histogram's sum for good.
    if not math.isfinite(total) or total > MAX_SECONDS:
        raise ValueError(f"duration out of range: {text[:60]!r}")
    return total
