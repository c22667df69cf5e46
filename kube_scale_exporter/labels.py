"""Label values taken from outside the exporter, made safe and kept few.

Names read from a backend (etcd resource prefixes and member names, Kubernetes resource
names) are data a user of that backend controls: a value may be long, hold any byte, or
come in thousands of distinct spellings. Every such label goes through `sanitize` (a
short, printable value from a small alphabet) and, where the set of values is open,
`top` (the n largest kept, the rest summed into "other"), so a flood of distinct values
costs at most n + 1 series.
"""

from __future__ import annotations

import re
from collections import Counter

OTHER = "other"
MAX_LENGTH = 100
# DNS names, resource paths and API groups fit in this alphabet; anything else is junk to
# be made harmless, not an exact spelling to preserve.
_UNSAFE = re.compile(r"[^a-z0-9._/-]")


def sanitize(raw: str | bytes, max_length: int = MAX_LENGTH) -> str:
    """A lower-case value of at most max_length characters from [a-z0-9._/-].

    Never empty and never OTHER itself, so a real name cannot merge into the
    catch-all series: those get a leading underscore.
    """
    text = raw.decode("utf-8", "replace") if isinstance(raw, bytes) else str(raw)
    text = _UNSAFE.sub("_", text.lower())[:max_length]
    if not text or text == OTHER:
        return "_" + text
    return text


def top(counts: Counter[str] | dict[str, float], n: int) -> dict[str, float]:
    """The n largest values by name (ties by name), the rest summed into OTHER.

    OTHER is present only when something was folded into it (or it came in non-zero).
    """
    counts = Counter(counts)
    other = counts.pop(OTHER, 0)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    kept = dict(ranked[:n])
    other += sum(v for _, v in ranked[n:])
    if other:
        kept[OTHER] = other
    return kept
