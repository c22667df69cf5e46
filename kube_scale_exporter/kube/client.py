"""A small Kubernetes API client: GET JSON and stream watch events (over httpclient.py); the only
writes are the reviews (TokenReview, SubjectAccessReview) of --web.kube-rbac.

Raw JSON instead of the `kubernetes` package: it costs +15 MiB RSS and ~17x the CPU per
relist (its model classes), and this runs on every node.
"""

import json

from kube_scale_exporter import httpclient, limits

from .config import KubeConfig

CONNECT_TIMEOUT = 5.0
# A GET (a list page, /version) must finish within this in all, not per read.
REQUEST_TIMEOUT = 30.0
# One GET reply held whole (/version, a one-off read of one object). List pages are not
# held whole: kube/listing.py decodes them item by item as they stream (stream()).
MAX_REPLY_BYTES = 4 << 20
# One watch event (one line): an object is at most etcd's --max-request-bytes (1.5 MiB
# by default) as stored; its JSON and the event around it add a little. A longer line
# is hostile and would only grow the buffer.
MAX_WATCH_LINE = 4 << 20
# Values in one object (a watch event's, a list item's): json decodes a byte of "[{},{}"
# into ~20 bytes of objects, so bytes alone do not bound what an object costs. A real
# object has one value a 10-20 bytes, and decodes to ~6x its JSON: the largest (etcd's
# 1.5 MiB) has ~150,000 and costs ~10 MiB. Counted with the brackets and commas inside
# strings, an overestimate, and only in text over VALUES_CHECKED_FROM bytes.
MAX_OBJECT_VALUES = 200_000
VALUES_CHECKED_FROM = 256 << 10
# A created review (TokenReview, SubjectAccessReview) echoes its spec with a status: a few
# KiB; 1 MiB leaves room for many groups and extra values and still bounds a hostile one.
MAX_CREATE_REPLY_BYTES = 1 << 20
_CAPS = {"MAX_REPLY_BYTES": MAX_REPLY_BYTES, "MAX_CREATE_REPLY_BYTES": MAX_CREATE_REPLY_BYTES}
# What an error answer may show of itself.
ERROR_BYTES = 4096


class ReplyTooLarge(limits.LimitExceeded):
    """A reply or a watch event went past its cap (the message names it)."""


def count_values(text, start=0) -> int:
    """Brackets and commas in the JSON text (str or bytes) from `start`, those inside
    strings too: at least as many as the values there."""
    marks = b"{[," if isinstance(text, (bytes, bytearray)) else "{[,"
    return sum(text.count(marks[i : i + 1], start) for i in range(3))


def too_many_values(what) -> ReplyTooLarge:
    return ReplyTooLarge(
        f"{what}: more than {MAX_OBJECT_VALUES} values in one object "
        "(MAX_OBJECT_VALUES in kube_scale_exporter/kube/client.py)"
    )


def check_values(text, start, what):
    """ReplyTooLarge if the JSON text from `start` may hold more than MAX_OBJECT_VALUES
    values: decoding it could cost far more than its size."""
    if len(text) - start > VALUES_CHECKED_FROM and count_values(text, start) > MAX_OBJECT_VALUES:
        raise too_many_values(what)


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
    except (ValueError, AttributeError, RecursionError):
        reason, message = "", str(body)[:200]
    return (Gone if status == 410 else ApiError)(status, reason, message, _retry_after(retry_after))


def _whole(cap):
    """A reader of a reply held whole, at most the bytes of `cap` (a name in _CAPS)."""

    def read(resp, what):
        try:
            return json.loads(limits.read_body(resp, _CAPS[cap], what))
        except limits.LimitExceeded as exc:
            raise ReplyTooLarge(f"{exc} ({cap} in kube_scale_exporter/kube/client.py)") from None

    return read


def status_error(status: dict) -> ApiError:
    """The error a Status object (a watch ERROR event's object) stands for."""
    code = status.get("code") or 0
    return (Gone if code == 410 else ApiError)(
        code, status.get("reason", ""), status.get("message", "")
    )


class Watch:
    """An open watch stream; iterate for event dicts, `close()` from any thread to end it."""

    def __init__(self, response):
        self._response = response

    def __iter__(self):
        with self._response:
            try:
                for line in limits.iter_lines(self._response, MAX_WATCH_LINE, "watch event"):
                    if line:
                        check_values(line, 0, "watch event")
                        yield json.loads(line)
            except limits.LimitExceeded as exc:
                raise ReplyTooLarge(
                    f"{exc} (MAX_WATCH_LINE in kube_scale_exporter/kube/client.py)"
                ) from None

    def close(self):
        self._response.interrupt()  # a read blocked in another thread ends
        self._response.close()


class KubeClient:
    """GET, WATCH and review POSTs against one API server; every request has connect and
    read timeouts and a total deadline."""

    def __init__(
        self, config: KubeConfig, connect_timeout=CONNECT_TIMEOUT, request_timeout=REQUEST_TIMEOUT
    ):
        self.config = config
        self.connect_timeout = connect_timeout
        self.request_timeout = request_timeout
        # The TLS settings are read from the config at each new connection.
        self._http = httpclient.Client(
            tls=lambda: httpclient.tls_context(self.config.verify, self.config.client_cert),
            headers={"Accept": "application/json"},
        )

    def _send(self, path, params, read_timeout, body=None):
        url = self.config.server + path
        for attempt in (0, 1):
            headers = {}
            if self.config.token is not None:
                headers["Authorization"] = "Bearer " + self.config.token.get()
            if body is not None:
                headers["Content-Type"] = "application/json"
            resp = self._http.request(
                "GET" if body is None else "POST",
                url,
                params=params,
                body=body,
                headers=headers,
                timeout=(self.connect_timeout, read_timeout),
            )
            if resp.status == 401 and attempt == 0 and self.config.token is not None:
                # The token may have rotated since we read it: read it again, retry once.
                resp.close()
                self.config.token.invalidate()
                continue
            if resp.status not in (200, 201):
                with resp:
                    body = limits.read_body(resp, ERROR_BYTES, "error", truncate=True)
                raise _error(
                    resp.status,
                    body.decode("utf-8", "replace"),
                    resp.headers.get("Retry-After"),
                )
            return resp
        raise AssertionError("unreachable")

    def get(self, path, params=None) -> dict:
        """One GET returning the decoded JSON body; raises ApiError / httpclient.TransportError."""
        return self._call(
            "GET", path, params, None, self.request_timeout, _whole("MAX_REPLY_BYTES")
        )

    def stream(self, path, params, consume):
        """One GET whose body is consume(chunks): its bytes handed over as they arrive,
        under the same deadline as get(), so that a reply too large to hold whole (a list
        page: kube/listing.py) is decoded as it comes. Returns what consume returns."""
        return self._call(
            "GET",
            path,
            params,
            None,
            self.request_timeout,
            lambda resp, what: consume(limits.iter_chunks(resp)),
        )

    def create(self, path, obj, timeout=None) -> dict:
        """One POST of `obj` (a TokenReview, a SubjectAccessReview) returning the decoded
        reply, under the same kind of bounds as a GET: `timeout` for the whole request
        (default the client's), at most MAX_CREATE_REPLY_BYTES of reply."""
        body = json.dumps(obj).encode()
        timeout = timeout or self.request_timeout
        return self._call("POST", path, None, body, timeout, _whole("MAX_CREATE_REPLY_BYTES"))

    def _call(self, method, path, params, body, timeout, read):
        """read(reply, what) under a deadline of `timeout` for the whole request."""
        with limits.deadline(timeout) as deadline:
            try:
                with self._send(path, params, timeout, body) as resp:
                    result = read(resp, f"{method} {path}")
                if deadline.expired():
                    # The watchdog's shutdown reads as the end of a reply without a
                    # length: what came is cut short, not complete.
                    raise httpclient.TransportError("cut at the deadline")
            except (httpclient.TransportError, ValueError) as exc:
                # ValueError too: a reply cut at the deadline is also a short document.
                if deadline.expired():
                    raise httpclient.Timeout(
                        f"{method} {path}: no complete answer within {timeout:g}s "
                        f"(the whole request): {type(exc).__name__}"
                    ) from None
                raise
        return result

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

    def close(self):
        self._http.close()
