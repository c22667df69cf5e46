"""One logfmt line per kind of connection trouble at most every INTERVAL seconds.

A client resetting connections mid-request is not worth a traceback each time (the
stdlib printed ~1.7 KB of traceback per reset, outside logfmt: 356 KB for 200 resets);
a flood of them must not flood the log either. The first occurrence is logged at once,
later ones are counted and reported with the next line of their kind.
"""

from __future__ import annotations

import logging
import threading
import time

INTERVAL_SECONDS = 10.0


class RateLimitedLog:
    def __init__(self, log: logging.Logger, interval: float = INTERVAL_SECONDS):
        self._log = log
        self._interval = interval
        self._lock = threading.Lock()
        self._last: dict[str, float] = {}
        self._suppressed: dict[str, int] = {}

    def note(self, kind: str, what: str, detail: str, level: int = logging.INFO) -> None:
        now = time.monotonic()
        with self._lock:
            last = self._last.get(kind)
            if last is not None and now - last < self._interval:
                self._suppressed[kind] = self._suppressed.get(kind, 0) + 1
                return
            self._last[kind] = now
            earlier = self._suppressed.pop(kind, 0)
        more = f" ({earlier} more in the last {now - last:.0f}s)" if earlier else ""
        self._log.log(level, "%s: latest %s%s", what, detail, more)
