"""A small etcd v3 client over etcd's grpc-gateway JSON API (POST /v3/...), over httpclient.py.

etcd 3.4 and later serve the gateway on every client URL, with the same TLS as gRPC.
Keys and values travel base64-encoded, int64 fields come back as decimal strings, and
fields holding their zero value are left out of the JSON, so every read below defaults
to zero but those a member never sends as zero (answers.required). Why not a gRPC
client: see docs/etcd.md, "Design notes".
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kube_scale_exporter.etcd import answers
from kube_scale_exporter.etcd.answers import (
    MALFORMED,
    Alarm,
    Member,
    Status,
    decode_key,
    encode_key,
    mapping,
    member_id,
    text,
    uint,
)

if TYPE_CHECKING:
    from kube_scale_exporter.httpclient import Client

# The HTTP client (with http.client and ssl) is imported where a request is made, so that
# a process that never talks to etcd does not pay for it (tests/test_imports.py).

# Reply caps (bytes), each far above what etcd sends: past one the answer is hostile or
# broken, and reading on would only cost memory. docs/reliability.md has the table.
# Status: ~300 bytes, more with an `errors` list of raised alarms.
STATUS_BYTES = 64 << 10
# Member list: ~400 bytes a member (ids, name, peer and client URLs); 15 members are
# ~6 KiB. The member count itself is capped in cluster.py (MAX_MEMBERS).
MEMBER_LIST_BYTES = 256 << 10
# Alarm list: at most one alarm of each kind per member, ~60 bytes each.
ALARM_BYTES = 64 << 10
# Range (count only, or one key without its value): a key is bounded by etcd's request
# limit (--max-request-bytes, 1.5 MiB by default), base64 adds a third.
RANGE_BYTES = 4 << 20
# path -> (cap, its name for error messages)
REPLY_CAPS = {
    "/v3/maintenance/status": (STATUS_BYTES, "STATUS_BYTES"),
    "/v3/cluster/member/list": (MEMBER_LIST_BYTES, "MEMBER_LIST_BYTES"),
    "/v3/maintenance/alarm": (ALARM_BYTES, "ALARM_BYTES"),
    "/v3/kv/range": (RANGE_BYTES, "RANGE_BYTES"),
}
# /metrics is read whole, line by line, keeping only the lines asked for: etcd's page is
# 100-300 KB with lines under 1 KB; a longer line or a page past 8 MiB is not etcd's.
METRICS_LINE_BYTES = 64 << 10
METRICS_PAGE_BYTES = 8 << 20
# What an error answer may show of itself.
ERROR_BYTES = 4096


class EtcdError(Exception):
    """etcd did not answer, or answered with an error; the message names the endpoint."""


@dataclass(frozen=True)
class TLSFiles:
    """Client TLS: the CA that signed etcd's serving certificate and our client pair."""

    ca: str | None = None
    cert: str | None = None
    key: str | None = None


def new_session(tls: TLSFiles) -> Client:
    """The kept-alive connections the clients of a cluster share."""
    from kube_scale_exporter import httpclient  # noqa: PLC0415  (see above)

    cert = (tls.cert, tls.key) if tls.cert else None
    return httpclient.Client(tls=lambda: httpclient.tls_context(tls.ca or True, cert))


class EtcdClient:
    """One etcd endpoint. Every request has its own timeout (connect and read)."""

    def __init__(self, session: Client, url: str, timeout: float):
        self.session = session
        self.url = url.rstrip("/")
        self.timeout = timeout
        self.requests_sent = 0  # read by the benchmark and tests

    def _post(self, path: str, body: dict) -> dict:
        """POST path, the answer read within --etcd.timeout in all and its reply cap."""
        from kube_scale_exporter import httpclient, limits  # noqa: PLC0415  (see above)

        self.requests_sent += 1
        where = f"{self.url}{path}"
        cap, cap_name = REPLY_CAPS[path]
        with limits.deadline(self.timeout) as deadline:
            try:
                with self.session.request(
                    "POST",
                    where,
                    body=json.dumps(body).encode(),
                    headers={"Content-Type": "application/json"},
                    timeout=self.timeout,
                ) as reply:
                    ok = reply.status == 200
                    data = limits.read_body(
                        reply, cap if ok else ERROR_BYTES, f"etcd reply to {path}", truncate=not ok
                    )
            except limits.LimitExceeded as exc:
                raise EtcdError(
                    f"{self.url}: {exc} ({cap_name} in kube_scale_exporter/etcd/client.py)"
                ) from None
            except httpclient.TransportError as exc:
                raise self._transport_error(where, exc, deadline) from None
        if not ok:
            try:
                message = json.loads(data).get("message") or data.decode("utf-8", "replace")
            except (ValueError, AttributeError, RecursionError):
                message = data.decode("utf-8", "replace")
            raise EtcdError(f"{where}: HTTP {reply.status}: {str(message).strip()[:200]}")
        try:
            return mapping(json.loads(data))
        except (ValueError, TypeError, RecursionError):
            raise EtcdError(f"{where}: answer is not a JSON object") from None

    def _transport_error(self, where: str, exc: Exception, deadline) -> EtcdError:
        if deadline.expired():
            return EtcdError(
                f"{where}: no complete answer within {self.timeout:g}s "
                f"(--etcd.timeout bounds the whole request): {type(exc).__name__}"
            )
        return EtcdError(str(exc))  # it names the URL

    def _read(self, path: str, body: dict, decode):
        """decode(document) for the answer to POST path; malformed answers are EtcdError."""
        doc = self._post(path, body)
        try:
            return decode(doc)
        except MALFORMED as exc:
            raise EtcdError(
                f"{self.url}{path}: malformed answer: {type(exc).__name__}: {str(exc)[:120]}"
            ) from None

    def status(self) -> Status:
        return self._read("/v3/maintenance/status", {}, answers.status)

    def members(self) -> list[Member]:
        def decode(doc):
            return [
                Member(
                    id=member_id(m["ID"]),
                    name=text(mapping(m).get("name", "")),
                    client_urls=tuple(text(u) for u in m.get("clientURLs", ())),
                )
                for m in doc.get("members", ())
            ]

        return self._read("/v3/cluster/member/list", {}, decode)

    def alarms(self) -> list[Alarm]:
        def decode(doc):
            return [
                Alarm(member_id(mapping(a).get("memberID", "0")), text(a.get("alarm", "NONE")))
                for a in doc.get("alarms", ())
            ]

        return self._read("/v3/maintenance/alarm", {"action": "GET"}, decode)

    def count(self, key: bytes, range_end: bytes) -> int:
        """Keys in [key, range_end): etcd counts them in its index and sends no key."""
        return self._read(
            "/v3/kv/range",
            {
                "key": encode_key(key),
                "range_end": encode_key(range_end),
                "count_only": True,
                "serializable": True,
            },
            lambda doc: uint(doc.get("count", 0)),
        )

    def first_key(self, key: bytes, range_end: bytes) -> bytes | None:
        """The smallest key in [key, range_end), without its value; None when empty."""

        def decode(doc):
            kvs = doc.get("kvs", ())
            found = decode_key(mapping(kvs[0])["key"]) if kvs else None
            # etcd answers within the range; anything else would walk the cursor backwards.
            unbounded = range_end == b"\x00"
            if found is not None and not (key <= found and (unbounded or found < range_end)):
                raise ValueError(f"key {found[:40]!r} outside the range asked")
            return found

        return self._read(
            "/v3/kv/range",
            {
                "key": encode_key(key),
                "range_end": encode_key(range_end),
                "keys_only": True,
                "limit": 1,
                "serializable": True,
            },
            decode,
        )

    def metric_lines(self, prefixes: tuple[bytes, ...]) -> list[bytes]:
        """The lines of the member's /metrics that start with one of `prefixes`, in one GET.

        The page (~150 KB) is streamed and only matching lines are kept, so its cost in
        memory is the lines the caller wants.
        """
        from kube_scale_exporter import httpclient, limits  # noqa: PLC0415  (see above)

        self.requests_sent += 1
        where = f"{self.url}/metrics"
        with limits.deadline(self.timeout) as deadline:
            try:
                with self.session.request("GET", where, timeout=self.timeout) as reply:
                    if reply.status != 200:
                        raise EtcdError(f"{where}: HTTP {reply.status}")
                    return [
                        line
                        for line in limits.iter_lines(
                            reply, METRICS_LINE_BYTES, "etcd /metrics", max_total=METRICS_PAGE_BYTES
                        )
                        if line.startswith(prefixes)
                    ]
            except limits.LimitExceeded as exc:
                raise EtcdError(
                    f"{self.url}: {exc} (METRICS_LINE_BYTES, METRICS_PAGE_BYTES "
                    "in kube_scale_exporter/etcd/client.py)"
                ) from None
            except httpclient.TransportError as exc:
                raise self._transport_error(where, exc, deadline) from None


def prefix_end(prefix: bytes) -> bytes:
    """The range_end that selects every key starting with `prefix` (etcdctl's --prefix)."""
    end = bytearray(prefix)
    for i in reversed(range(len(end))):
        if end[i] < 0xFF:
            end[i] += 1
            return bytes(end[: i + 1])
    return b"\x00"  # all keys
