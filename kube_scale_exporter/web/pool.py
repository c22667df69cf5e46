"""A fixed-size pool of daemon worker threads, started only when work needs them.

`then(item, result)` runs after `work(item)`, once its thread counts as free again: what it
hands on (the HTTP server gives the connection back to its loop, which reads the client's
next request) cannot find every thread busy and start another. Were the hand-back inside
`work`, back-to-back requests on one connection would start a thread about every 60th
request, up to the pool's size (54 threads, 0.9 MiB of RSS, after 3,000 scrapes).

Not concurrent.futures.ThreadPoolExecutor: its threads are joined at interpreter exit,
so one answer stuck on a hung collector would hold up SIGTERM; and no futures are needed.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections.abc import Callable

log = logging.getLogger(__name__)


class Pool:
    def __init__(self, size: int, work: Callable, name: str, then: Callable | None = None):
        self._size = max(1, size)
        self._work = work
        self._then = then
        self._name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        # Threads free to take an item (blocked on the queue, or on their way to it), and
        # items queued that no thread has taken yet: a thread starts only for an item no
        # free thread will take. Both are counts, not promises to a particular thread, so
        # they stay right whichever free thread the queue hands an item to.
        self._idle = 0
        self._unclaimed = 0

    def submit(self, item) -> None:
        with self._lock:
            self._queue.put(item)
            self._unclaimed += 1
            if self._unclaimed <= self._idle or self._threads >= self._size:
                return  # a free thread takes it, or the next one to finish its work does
            try:
                threading.Thread(
                    target=self._run, name=f"{self._name}-{self._threads + 1}", daemon=True
                ).start()
            except RuntimeError as exc:  # a pids limit: the threads there are will do
                log.warning(
                    "cannot start another %s worker thread (%d running): %s",
                    self._name,
                    self._threads,
                    exc,
                )
            else:
                self._threads += 1
                self._idle += 1

    def threads(self) -> int:
        return self._threads

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            with self._lock:
                self._idle -= 1
                self._unclaimed -= 1
            result = self._survive(self._work, item)
            with self._lock:
                self._idle += 1
            if self._then is not None:
                self._survive(self._then, item, result)

    def _survive(self, call: Callable, *args):
        """call(*args), or None when it raised: a thread must survive; one line, not a
        traceback."""
        try:
            return call(*args)
        except Exception as exc:
            log.error("%s worker: %r", self._name, exc)
            log.debug("%s worker", self._name, exc_info=True)
            return None
