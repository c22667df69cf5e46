"""What etcd answers over its JSON gateway: the dataclasses the collector uses, and the
decoding of the gateway's fields (int64 as decimal strings, bytes as base64)."""

from __future__ import annotations

import base64
import binascii
import re
from dataclasses import dataclass

from kube_scale_exporter.labels import sanitize

# An answer's fields are decoded by these; anything else in their place (a proxy's
# error page, a truncated or hostile document) is an EtcdError, like no answer at all.
MALFORMED = (KeyError, IndexError, TypeError, ValueError, AttributeError, binascii.Error)
MAX_UINT64 = (1 << 64) - 1

# Maintenance.Status' fields up to etcd 3.7 (rpc.proto's StatusResponse; 3.7 added none).
# `check` names any other: the member is newer than this exporter, which reads the fields
# it knows.
STATUS_FIELDS = frozenset(
    {
        "header",
        "version",
        "dbSize",
        "leader",
        "raftIndex",
        "raftTerm",
        "raftAppliedIndex",
        "errors",
        "dbSizeInUse",
        "isLearner",
        "storageVersion",
        "dbSizeQuota",
        "downgradeInfo",
    }
)
# At most this many new field names are kept, each cut to NAME_CHARS: the answer is
# bounded (STATUS_BYTES) but its field names are whatever the peer sent.
MAX_NEW_FIELDS, NAME_CHARS = 5, 40
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9_]")
# The etcd versions the tests run (testbed/etcd_server.py VERSIONS, by minor) and the
# storage versions those write. A member keeps its data at the cluster version's storage
# version: a 3.7 member at "3.6.0" while another still runs 3.6 (or a downgrade to 3.6 is
# enabled), then "3.7.0"; 3.6 likewise at "3.5.0", then "3.6.0"; 3.5 sends none.
KNOWN_VERSIONS = ("3.5", "3.6", "3.7")
KNOWN_STORAGE_VERSIONS = ("3.5.0", "3.6.0", "3.7.0")


@dataclass(frozen=True)
class Status:
    """The fields of Maintenance.Status that the collector uses."""

    member_id: str
    leader_id: str
    version: str
    db_size: int
    db_size_in_use: int
    db_size_quota: int  # 0 when etcd does not send it (before 3.6)
    raft_term: int | None  # None when read from /metrics, which has no term
    raft_applied_index: int
    # The version of the member's data (etcd 3.6+); None before 3.6, and from /metrics.
    storage_version: str | None = None
    new_fields: tuple[str, ...] = ()  # fields not in STATUS_FIELDS, for `check`
    # The target of a downgrade the cluster has enabled (downgradeInfo, etcd 3.6+), else None.
    downgrade_target: str | None = None

    @property
    def is_leader(self) -> bool:
        return self.member_id == self.leader_id and self.member_id != "0"


@dataclass(frozen=True)
class Member:
    id: str
    name: str
    client_urls: tuple[str, ...]

    @property
    def label(self) -> str:
        """The member's name (sanitized: etcd accepts any), or its id in hex (how etcdctl
        prints it) before it started."""
        return sanitize(self.name, 63) if self.name else format(int(self.id), "x")


@dataclass(frozen=True)
class Alarm:
    member_id: str
    alarm: str  # "NOSPACE" or "CORRUPT"


def uint(value) -> int:
    """An unsigned 64-bit field: a JSON number or (int64 over the gateway) a decimal string."""
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"expected an unsigned integer, got {value!r:.40}")
    n = int(value)
    if not 0 <= n <= MAX_UINT64:
        raise ValueError(f"out of range: {value!r:.40}")
    return n


def required(doc: dict, key: str):
    """A field every etcd member sends (never zero, so never left out by the gateway):
    without it the answer is not a member's, and reading on would report zeros."""
    if key not in doc:
        raise ValueError(f"no {key}, which every etcd member sends")
    return doc[key]


def member_id(value) -> str:
    """Member ids as the gateway sends them: decimal strings."""
    return str(uint(value))


def text(value, limit: int = 256) -> str:
    if not isinstance(value, str):
        raise TypeError(f"expected a string, got {value!r:.40}")
    return value[:limit]


def mapping(value) -> dict:
    if not isinstance(value, dict):
        raise TypeError(f"expected an object, got {value!r:.40}")
    return value


def downgrade_target(value) -> str | None:
    """downgradeInfo's targetVersion while a downgrade is enabled; the gateway sends `{}`
    when none is (false and "" are left out)."""
    info = mapping(value)
    if info.get("enabled") is not True:
        return None
    return text(info.get("targetVersion", ""), NAME_CHARS) or "?"


def status(doc: dict) -> Status:
    """Maintenance.Status as the gateway answers it (etcd 3.5-3.7; 3.4's reads the same):
    fields holding zero are left out (no dbSizeQuota before 3.6, no leader while there is
    none)."""
    storage = doc.get("storageVersion")
    return Status(
        member_id=member_id(required(mapping(required(doc, "header")), "member_id")),
        leader_id=member_id(doc.get("leader", "0")),
        version=text(doc.get("version", "")),
        db_size=uint(required(doc, "dbSize")),
        # Without it every byte would count as free pages, worth a defragment.
        db_size_in_use=uint(required(doc, "dbSizeInUse")),
        db_size_quota=uint(doc.get("dbSizeQuota", 0)),
        raft_term=uint(doc.get("raftTerm", 0)),
        raft_applied_index=uint(doc.get("raftAppliedIndex", 0)),
        storage_version=None if storage is None else text(storage, NAME_CHARS),
        downgrade_target=downgrade_target(doc.get("downgradeInfo", {})),
        new_fields=tuple(
            _UNSAFE_NAME.sub("?", k[:NAME_CHARS])
            for k in sorted(k for k in doc if k not in STATUS_FIELDS)[:MAX_NEW_FIELDS]
        ),
    )


def encode_key(key: bytes) -> str:
    return base64.b64encode(key).decode("ascii")


def decode_key(encoded: str) -> bytes:
    return base64.b64decode(text(encoded, 1 << 20), validate=True)
