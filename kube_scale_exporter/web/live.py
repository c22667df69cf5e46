"""The web config in force: re-read when one of its files changes, never under a lock that
requests wait on (the file format and its checks: config.py)."""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from dataclasses import dataclass

from kube_scale_exporter.web.auth import BasicAuth
from kube_scale_exporter.web.config import BadHashError, WebConfig, load

log = logging.getLogger(__name__)
# How often a connection may look at the files for changes (a few stat calls).
RELOAD_CHECK_SECONDS = 1.0


@dataclass(frozen=True)
class Active:
    """What connections use now: built once per version of the files."""

    config: WebConfig
    ssl_context: ssl.SSLContext | None
    basic_auth: BasicAuth | None


class LiveWebConfig:
    """The web config as it is on disk, re-read when one of its files changes.

    `current()` is called per connection and per request; it stats the files at most
    once per RELOAD_CHECK_SECONDS. It returns None while the files on disk do not make a
    valid config, so the server refuses connections instead of serving stale settings.
    """

    def __init__(self, config: WebConfig):
        self._lock = threading.Lock()
        self._active: Active | None = _activate(config)
        self._stamp = _stamp(config.files())
        self._watched = config.files()
        self._checked = time.monotonic()
        self._checking = False

    def current(self) -> Active | None:
        now = time.monotonic()
        with self._lock:
            due = not self._checking and now - self._checked >= RELOAD_CHECK_SECONDS
            if due:
                self._checked, self._checking = now, True
            active = self._active
        if not due:
            return active
        # Reading and checking the files happens outside the lock: requests meanwhile
        # use the settings in force, never wait on a reload.
        try:
            self._reload_if_changed()
        finally:
            with self._lock:
                self._checking = False
                active = self._active
        return active

    def _reload_if_changed(self) -> None:
        stamp = _stamp(self._watched)
        if stamp == self._stamp:
            return
        self._stamp = stamp
        path = self._watched[0]
        try:
            config = load(path)
            active = _activate(config)
        except BadHashError as exc:
            log.error(
                "--web.config.file: not reloaded, the previous settings stay in force "
                "until it is fixed: %s",
                exc,
            )
            return
        except Exception as exc:  # noqa: BLE001  (whatever broke it, the old users must stop)
            log.error("--web.config.file: refusing connections until it is fixed: %s", exc)
            with self._lock:
                self._active = None
            return
        with self._lock:
            self._active = active
        self._watched = config.files()
        self._stamp = _stamp(self._watched)
        log.info("--web.config.file: reloaded %s", path)


def _activate(config: WebConfig) -> Active:
    return Active(config, config.ssl_context(), config.basic_auth())


def _stamp(paths: tuple[str, ...]) -> tuple:
    """Identity and size of each file; a Secret update swaps a symlink, a new inode."""
    out = []
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out.append(None)
            continue
        out.append((st.st_ino, st.st_mtime_ns, st.st_size))
    return tuple(out)
