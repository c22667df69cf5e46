"""A fixed-size pool of daemon worker threads, started only when work needs them.

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
    def __init__(self, size: int, work: Callable, name: str):
        self._size = max(1, size)
        self._work = work
        self._name = name
        self._queue: queue.SimpleQueue = queue.SimpleQueue()
        self._lock = threading.Lock()
        self._threads = 0
        self._waiting = 0  # threads blocked on the queue and not yet promised an item

    def submit(self, item) -> None:
        with self._lock:
            self._queue.put(item)
            if self._waiting:
                self._waiting -= 1
                return
            if self._threads < self._size:
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
            # else: the item waits for the next thread to finish its work

    def threads(self) -> int:
        return self._threads

    def _run(self) -> None:
        while True:
            item = self._queue.get()
            try:
                self._work(item)
            except Exception as exc:  # a thread must survive; one line, not a traceback
                log.error("%s worker: %r", self._name, exc)
                log.debug("%s worker", self._name, exc_info=True)
            with self._lock:
                if not self._queue.empty():
                    continue  # take the queued item without waiting to be promised one
                self._waiting += 1
