"""An etcd JSON gateway answer through etcd/client.py's calls and their decoders
(etcd/answers.py): the same body as the answer to Status, MemberList, Alarm, a key
count and a first-key read, with HTTP 200 and with 500.

Documented error: EtcdError. Invariants: integers fit uint64, member ids are decimal,
texts (versions, a downgrade's target) are bounded, new Status field names few and printable, and a first key lies
within the range asked.
"""

from __future__ import annotations

import dataclasses

from fuzz import InvariantBroken, http_reply, piece_sizes, pieces
from kube_scale_exporter.etcd.answers import MAX_UINT64
from kube_scale_exporter.etcd.client import EtcdClient, EtcdError

TARGETS = ("kube_scale_exporter.etcd.client", "kube_scale_exporter.etcd.answers")
RANGE = (b"/registry/pods/", b"/registry/pods0")
# Status' fields that are texts (the rest are unsigned integers).
TEXTS = ("member_id", "leader_id", "version", "storage_version", "new_fields", "downgrade_target")


class _Session:
    """What EtcdClient asks of an httpclient.Client, answering with the input."""

    def __init__(self, data: bytes, status: int):
        self.data, self.status = data, status

    def request(self, method, url, *, timeout, body=None, headers=None):
        return http_reply(pieces(self.data, piece_sizes(self.data)[0]), self.status)


def check(data: bytes) -> None:
    for status in (200, 500):
        client = EtcdClient(_Session(data, status), "http://127.0.0.1:2379", 5.0)
        for read in (client.status, client.members, client.alarms, _count, _first_key):
            try:
                got = read(client) if read in (_count, _first_key) else read()
            except EtcdError:
                continue
            if status != 200:
                raise InvariantBroken(f"HTTP {status} decoded as {got!r:.100}")
            _valid(got)


def _count(client):
    return client.count(*RANGE)


def _first_key(client):
    return ("first_key", client.first_key(*RANGE))


def _uint(n) -> None:
    if not (isinstance(n, int) and 0 <= n <= MAX_UINT64):
        raise InvariantBroken(f"{n!r:.60} is not a uint64")


def _id(text) -> None:
    if not (isinstance(text, str) and text.isdecimal() and int(text) <= MAX_UINT64):
        raise InvariantBroken(f"member id {text!r:.60}")


def _valid(got) -> None:
    if isinstance(got, int):
        _uint(got)
    elif isinstance(got, tuple):
        key = got[1]
        if key is not None and not RANGE[0] <= key < RANGE[1]:
            raise InvariantBroken(f"first key {key!r:.60} outside the range")
    elif isinstance(got, list):
        for item in got:
            _id(item.member_id if hasattr(item, "member_id") else item.id)
            for text in (
                getattr(item, "name", ""),
                getattr(item, "alarm", ""),
                *getattr(item, "client_urls", ()),
            ):
                if not isinstance(text, str) or len(text) > 256:
                    raise InvariantBroken(f"text {text!r:.60}")
    else:
        _id(got.member_id)
        _id(got.leader_id)
        for name, value in dataclasses.asdict(got).items():  # a Status: sizes, term, index
            if name not in TEXTS:
                _uint(value)
        if (
            len(got.version) > 256
            or len(got.storage_version or "") > 40
            or len(got.downgrade_target or "") > 40
        ):
            raise InvariantBroken("version text unbounded")
        names = got.new_fields
        if len(names) > 5 or not all(
            len(n) <= 40 and n.isascii() and n.isprintable() for n in names
        ):
            raise InvariantBroken(f"new fields {names!r:.100}")
