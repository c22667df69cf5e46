"""A small read-only Kubernetes API client: GET JSON and stream watch events, over requests.

Raw JSON instead of the `kubernetes` package: it costs +15 MiB RSS and ~17x the CPU per
relist (its model classes), and this runs on every node.
"""

import json
import socket

import requests

from kube_scale_exporter import limits

from .config import KubeConfig

CONNECT_TIMEOUT = 5.0
# A GET (a list page, /version) must finish within this in all, not per read.
REQUEST_TIMEOUT = 30.0
# One GET reply, read as it arrives. The largest real ones are list pages of 500 objects
# (informers page with limit=500): pods are 5-20 KB of JSON with managedFields, nodes up
# to ~40 KB (the kubelet reports at most 50 images), so ~20 MB at worst; a node-mode list
# from the watch cache holds only the node's pods (110 by default). Objects near etcd's
# 1.5 MiB limit could make a page larger: docs/reliability.md says so.
MAX_REPLY_BYTES = 32 << 20
# One watch event (one line): an object is at most etcd's --max-request-bytes (1.5 MiB
# by default) as stored; its JSON and the event around it add a little. A longer line
# is hostile and would only grow the buffer.
MAX_WATCH_LINE = 4 << 20
# What an error answer may show of itself.
ERROR_BYTES = 4096


class ReplyTooLarge(limits.LimitExceeded):
    """A reply or a watch event went past its cap (the message names it)."""


class ApiError(Exception):
    """The API server answered with an error status (or a watch ERROR event)."""

    def __init__(self, status, reason="", message="", retry_after=None):
        super().__init__(f"{status} {reason}: {message}".strip())
        self.status = status
        self.reason = reason
        self.message = message
        self.retry_after = retry_after  # seconds the server asked us to wait (429, 503)


class Gone(ApiError):
    """410: the resourceVersion (or continue token) is compacted away; relist."""


def _retry_after(header):
    """Retry-After in seconds; None when absent or not a number (HTTP dates are not sent
    by the API server)."""
    try:
        seconds = float(header)
    except (TypeError, ValueError):
        return None
    return seconds if 0 <= seconds < float("inf") else None


def _error(status, body, retry_after=None):
    try:
        doc = json.loads(body)
        reason, message = doc.get("reason", ""), doc.get("message", "")
    except (ValueError, AttributeError):
        reason, message = "", str(body)[:200]
    return (Gone if status == 410 else ApiError)(status, reason, message, _retry_after(retry_after))


class Watch:
    """An open watch stream; iterate for event dicts, `close()` from any thread to end it."""

    def __init__(self, response):
        self._response = response
        # The socket, kept so close() can interrupt a read blocked in another thread.
        conn = getattr(response.raw, "_connection", None)
        self._sock = getattr(conn, "sock", None)

    def __iter__(self):
        with self._response:
            try:
                for line in limits.iter_lines(self._response, MAX_WATCH_LINE, "watch event"):
                    if line:
                        yield json.loads(line)
            except limits.LimitExceeded as exc:
                raise ReplyTooLarge(
                    f"{exc} (MAX_WATCH_LINE in kube_scale_exporter/kube/client.py)"
                ) from None

    def close(self):
        if self._sock is not None:
            try:
                self._sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._response.close()


class KubeClient:
    """GET and WATCH against one API server; every request has connect and read timeouts."""

    def __init__(
        self, config: KubeConfig, connect_timeout=CONNECT_TIMEOUT, request_timeout=REQUEST_TIMEOUT
    ):
        self.config = config
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        # REQUESTS_CA_BUNDLE and proxy variables must not replace the cluster's CA / route
        # (trust_env off), and a GET must end within request_timeout in all.
        self._session = limits.bounded_session()
        self._session.headers["Accept"] = "application/json"
        self._session.headers["User-Agent"] = "kube-scale-exporter"

    def _send(self, path, params, read_timeout):
        url = self.config.server + path
        for attempt in (0, 1):
            headers = {}
            if self.config.token is not None:
                headers["Authorization"] = "Bearer " + self.config.token.get()
            resp = self._session.get(
                url,
                params=params,
                headers=headers,
                stream=True,
                timeout=(self.connect_timeout, read_timeout),
                verify=self.config.verify,
                cert=self.config.client_cert,
            )
            if resp.status_code == 401 and attempt == 0 and self.config.token is not None:
                # The token may have rotated since we read it: read it again, retry once.
                resp.close()
                self.config.token.invalidate()
                continue
            if resp.status_code != 200:
                with resp:
                    body = limits.read_body(resp, ERROR_BYTES, "error", truncate=True)
                raise _error(
                    resp.status_code,
                    body.decode("utf-8", "replace"),
                    resp.headers.get("Retry-After"),
                )
            return resp
        raise AssertionError("unreachable")

    def get(self, path, params=None) -> dict:
        """One GET returning the decoded JSON body; raises ApiError / requests exceptions."""
        with limits.deadline(self.request_timeout) as deadline:
            try:
                with self._send(path, params, self.request_timeout) as resp:
                    body = limits.read_body(resp, MAX_REPLY_BYTES, f"GET {path}")
            except limits.LimitExceeded as exc:
                raise ReplyTooLarge(
                    f"{exc} (MAX_REPLY_BYTES in kube_scale_exporter/kube/client.py)"
                ) from None
            except limits.TRANSPORT_ERRORS as exc:
                if deadline.expired():
                    raise requests.exceptions.Timeout(
                        f"GET {path}: no complete answer within {self.request_timeout:g}s "
                        f"(the whole request): {type(exc).__name__}"
                    ) from None
                raise
        return json.loads(body)

    def watch(self, path, params, read_timeout) -> Watch:
        """Open a watch (`params` should carry watch, resourceVersion and timeoutSeconds).

        `read_timeout` bounds the silence between two reads; keep it above the server's
        bookmark interval (about a minute) so a quiet but healthy watch is not cut.
        """
        params = dict(params, watch="1")
        # The headers within read_timeout in all (a server dripping them must not hold
        # the informer); the events after them are bounded per read only.
        with limits.deadline(read_timeout):
            return Watch(self._send(path, params, read_timeout))

    def server_version(self) -> tuple[int, int]:
        """(major, minor) from /version, e.g. (1, 20)."""
        doc = self.get("/version")
        minor = "".join(ch for ch in str(doc.get("minor", "0")) if ch.isdigit()) or "0"
        return int(doc.get("major", 0)), int(minor)

    def close(self):
        self._session.close()
