"""What `kube-scale-exporter check` says about etcd: quota, alarms, fragmentation, events,
versions."""

from __future__ import annotations

import re
from collections import defaultdict

from kube_scale_exporter.collectors.etcd.state import EtcdState
from kube_scale_exporter.etcd.answers import KNOWN_STORAGE_VERSIONS, KNOWN_VERSIONS
from kube_scale_exporter.etcd.cluster import MemberState
from kube_scale_exporter.etcd.page import Histogram, MemberMetrics, missing
from kube_scale_exporter.etcd.client import TLSFiles
from kube_scale_exporter.registry import Finding

# When the database is this close to its quota, say so.
NEAR_QUOTA_WARNING, NEAR_QUOTA_CRITICAL = 0.6, 0.8
# Free pages worth a defragment: a fifth of the quota and a third of the file.
DEFRAG_OF_QUOTA, DEFRAG_OF_SIZE = 0.2, 0.33

CORRUPT_ADVICE = (
    "Do not disarm CORRUPT: the member's data differs from the others. Remove "
    "the member and add it back empty so it copies a healthy member's data."
)


def etcdctl(url: str | None, tls: TLSFiles) -> str:
    """The etcdctl command line that reaches this member as the exporter does."""
    parts = ["etcdctl", f"--endpoints={url or 'URL'}"]
    for flag, path in (("--cacert", tls.ca), ("--cert", tls.cert), ("--key", tls.key)):
        if path:
            parts.append(f"{flag}={path}")
    return " ".join(parts)


def nospace_advice(ctl: str) -> str:
    """A shell script: compact the history, defragment every member, then disarm."""
    return (
        "# Compact the history, defragment every member (one at a time: each blocks while it\n"
        "# runs), then disarm; the alarm stays raised until disarmed.\n"
        f"rev=$({ctl} endpoint status --write-out=json "
        f"| grep -o '\"revision\":[0-9]*' | head -1 | cut -d: -f2)\n"
        f'{ctl} compaction --physical "$rev"\n'
        f"{ctl} defrag --cluster\n"
        f"{ctl} alarm disarm"
    )


# Since the member started, more than 1% of fsyncs (commits) above the bucket bound next
# above etcd's guidance (10 ms, 25 ms) means the p99 is surely above it.
SLOW_DISK = (("WAL fsync", "fsync", 0.016, "10 ms"), ("backend commit", "commit", 0.032, "25 ms"))
DISK_ADVICE = (
    "etcd waits for its disk on every write. Give each member a local SSD of its "
    "own (not a network disk, not shared with other I/O), and move events to their "
    "own etcd (kube-apiserver --etcd-servers-overrides) to halve the writes here."
)


def _slow_disk(
    where: str, name: str, hist: Histogram | None, bound: float, guide: str
) -> Finding | None:
    share = hist.share_above(bound) if hist is not None else None
    if share is None or share <= 0.01:
        return None
    return Finding(
        "warning",
        f"{where}: {share:.1%} of {name}s took over {bound * 1000:g} ms "
        f"since the member started (etcd wants the p99 below {guide})",
        DISK_ADVICE,
    )


METRICS_ONLY_NOTE = (
    "Read through its /metrics alone (--etcd.local-access=metrics): no alarm list, raft "
    "term or key counts. A raised NOSPACE shows as refused writes. --etcd.local-access=full "
    "reads them with a client key that can read, write and delete every key in etcd."
)
REFUSED_ADVICE = (
    "etcd answers ResourceExhausted when its database is over the quota or NOSPACE is "
    'raised ("database space exceeded"), and when applying lags committing ("too many '
    "requests\"). See the alarms with etcdctl alarm list and the member's log."
)


UPGRADE_ADVICE = (
    "Until every member runs the same version the cluster runs as its oldest member "
    "({oldest}): the newer version's features stay off, and the newer members keep their "
    "data at the older storage version. Replace the rest one at a time, each once the one "
    "before is healthy (etcdctl endpoint health --cluster)."
)
PATCH_ADVICE = (
    "Members of one minor version work together, but the older ones run without the "
    "newer release's fixes. Replace the rest one at a time, each once the one before is "
    "healthy (etcdctl endpoint health --cluster)."
)
STORAGE_ADVICE = (
    "Once every member runs the new version the cluster version moves, and each member "
    "moves its data to it within seconds. If this stays, the member's log says why "
    '("failed to update storage version").'
)
DOWNGRADE_ADVICE = (
    "etcdctl downgrade enable moved the cluster version back and each member's data with "
    "it: replace the members with etcd {target} one at a time, each once the one before is "
    "healthy (etcdctl endpoint health --cluster), or end it with etcdctl downgrade cancel. "
    "While it is enabled the cluster runs as {target}."
)
UNKNOWN_ADVICE = (
    f"Tested on etcd {', '.join(KNOWN_VERSIONS)} (storage versions "
    f"{', '.join(KNOWN_STORAGE_VERSIONS)}): the exporter reads the Status fields and "
    "/metrics samples those send. A newer kube-scale-exporter may know this one."
)


def _release(version: str) -> str:
    """ "3.6.16" of "3.6.16" or "3.6.16-rc.1" (a version _minor() reads)."""
    return re.match(r"\d+\.\d+\.\d+", version)[0]


def _minor(version: str) -> str | None:
    """The minor version, "3.6", of "3.6.16" or "3.6.0-rc.1"; None for any other text."""
    match = re.match(r"(\d+)\.(\d+)\.\d+", version)
    return f"{match[1]}.{match[2]}" if match else None


def _shown(text: str) -> str:
    """What a member sent, as `check` prints it: short, and no control characters."""
    return re.sub(r"[^0-9A-Za-z.+_-]", "?", text[:40]) or "(none)"


def _on(by: dict[str, list[str]]) -> str:
    return "; ".join(f"{what} on {', '.join(names)}" for what, names in sorted(by.items()))


def _key(version: str) -> tuple[int, ...]:
    return tuple(map(int, version.split(".")))


def _versions(cluster: str, answering: list[MemberState]) -> list[Finding]:
    """An upgrade or downgrade part way (members at different etcd versions, or data not
    yet at its member's storage version), and versions or Status fields this exporter
    does not know."""
    out = []
    where = f"etcd {cluster}"
    versions, unknown, storage, new = (defaultdict(list) for _ in range(4))
    targets = set()
    for m in answering:
        s = m.status
        versions[_shown(s.version)].append(m.name)
        minor = _minor(s.version)
        if minor not in KNOWN_VERSIONS:
            unknown[f"etcd {_shown(s.version)}" if s.version else "no etcd version"].append(m.name)
        if s.storage_version is not None and s.storage_version not in KNOWN_STORAGE_VERSIONS:
            unknown[f"storage version {_shown(s.storage_version)}"].append(m.name)
        elif s.storage_version and minor in KNOWN_VERSIONS and _minor(s.storage_version) != minor:
            storage[f"data at storage version {s.storage_version}"].append(m.name)
        if s.new_fields:
            new[", ".join(s.new_fields)].append(m.name)
        if s.downgrade_target:
            targets.add(_shown(s.downgrade_target))
    # Releases (x.y.z), each once, oldest first: text that is no version is named below.
    releases = sorted({v for v in versions if _minor(v)}, key=lambda v: _key(_release(v)))
    minors = sorted({_minor(v) for v in releases}, key=_key)
    state = "; ".join(filter(None, (_on(versions), _on(storage))))
    if targets:
        target = ", ".join(sorted(targets))
        out.append(
            Finding(
                "warning",
                f"{where}: a downgrade to {target} is under way: {state}",
                DOWNGRADE_ADVICE.format(target=_minor(target) or target),
            )
        )
    elif len(releases) > 1 or storage:
        if len(minors) > 1:
            advice = UPGRADE_ADVICE.format(oldest=minors[0])
        else:
            advice = PATCH_ADVICE if len(releases) > 1 else STORAGE_ADVICE
        out.append(Finding("warning", f"{where}: a rolling upgrade is half done: {state}", advice))
    if unknown:
        out.append(
            Finding(
                "info",
                f"{where}: a version this exporter does not know: {_on(unknown)}",
                UNKNOWN_ADVICE,
            )
        )
    if new:
        out.append(
            Finding(
                "info",
                f"{where}: Status fields this exporter does not read: {_on(new)}",
                "etcd sends fields newer than this exporter knows; it reads those it knows.",
            )
        )
    return out


MISSING_ADVICE = (
    "The exporter reads the names etcd 3.5 to 3.7 serve; a newer etcd may have renamed "
    "these, and a newer kube-scale-exporter may know the new names. Their series are left "
    "out for this member, not reported as zero."
)
METHODS_ADVICE = (
    "etcd's KV service has methods newer than this exporter: "
    "kubescale_etcd_range_requests_total counts Range and RangeStream only. A newer "
    "kube-scale-exporter may know these."
)


def _unknown_page(where: str, metrics: MemberMetrics) -> list[Finding]:
    """What a member's /metrics lacks of what the exporter reads, and KV methods it has
    not met."""
    out = []
    lacking = missing(metrics)
    if lacking:
        out.append(
            Finding("warning", f"{where}: its /metrics has no {', '.join(lacking)}", MISSING_ADVICE)
        )
    if metrics.new_methods:
        out.append(
            Finding(
                "info",
                f"{where}: KV methods this exporter does not count: "
                f"{', '.join(metrics.new_methods)}",
                METHODS_ADVICE,
            )
        )
    return out


def _mib(n: float) -> str:
    return f"{n / 1024**2:,.0f} MiB"


def advise(state: EtcdState) -> list[Finding]:
    """What `check` tells a person: quota, alarms, fragmentation, events in the main etcd,
    versions.

    Commands name the member URLs and TLS files the exporter uses, so they run as printed.
    """
    out = []
    for cluster in state.clusters:
        # A cluster read through /metrics alone has no client URL for etcdctl to use.
        metrics_only = cluster.name in state.metrics_only
        tls = TLSFiles() if metrics_only else state.tls
        if not cluster.up:
            out.append(
                Finding(
                    "critical",
                    f"etcd {cluster.name}: no member answered",
                    f"error: {cluster.error}",
                )
            )
            continue
        if metrics_only:
            out.append(
                Finding("info", f"etcd {cluster.name}: watched without a key", METRICS_ONLY_NOTE)
            )
        answering = [m for m in cluster.members if m.status is not None]
        nospace = [m.name for m in answering if m.alarms and "NOSPACE" in m.alarms]
        if nospace:
            out.append(
                Finding(
                    "critical",
                    f"etcd {cluster.name}: alarm NOSPACE is raised on {', '.join(nospace)} "
                    "(writes are refused)",
                    nospace_advice(etcdctl(None if metrics_only else answering[0].url, tls)),
                )
            )
        for m in cluster.members:
            where = f"etcd {cluster.name} member {m.name}"
            if m.status is None:
                out.append(Finding("warning", f"{where}: did not answer", f"error: {m.error}"))
                continue
            if m.metrics is None:
                out.append(
                    Finding(
                        "warning",
                        f"{where}: /metrics not read (no disk latency or read load)",
                        f"error: {m.metrics_error}\nWhere etcd serves /metrics elsewhere "
                        "(--listen-metrics-urls), give --etcd.metrics-url.",
                    )
                )
            else:
                refused = m.metrics.writes_refused
                if refused:
                    out.append(
                        Finding(
                            "warning",
                            f"{where}: refused {refused:,.0f} writes since it started",
                            REFUSED_ADVICE,
                        )
                    )
                for name, attr, bound, guide in SLOW_DISK:
                    slow = _slow_disk(where, name, getattr(m.metrics, attr), bound, guide)
                    if slow:
                        out.append(slow)
                out.extend(_unknown_page(where, m.metrics))
            s = m.status
            used = s.db_size / m.quota_bytes
            if m.alarms and "CORRUPT" in m.alarms:
                out.append(Finding("critical", f"{where}: alarm CORRUPT is raised", CORRUPT_ADVICE))
            if used >= NEAR_QUOTA_WARNING:
                severity = "critical" if used >= NEAR_QUOTA_CRITICAL else "warning"
                out.append(
                    Finding(
                        severity,
                        f"{where}: database {_mib(s.db_size)} is {used:.0%} of its "
                        f"{_mib(m.quota_bytes)} quota ({m.quota_source})",
                        "At the quota etcd raises NOSPACE and refuses every write. Defragment if "
                        "much is free (see below), move events to their own etcd, or raise "
                        "--quota-backend-bytes (etcd recommends at most 8 GiB) on every member.",
                    )
                )
            free = s.db_size - s.db_size_in_use
            if free >= DEFRAG_OF_QUOTA * m.quota_bytes and free >= DEFRAG_OF_SIZE * s.db_size:
                out.append(
                    Finding(
                        "warning",
                        f"{where}: {_mib(free)} of the {_mib(s.db_size)} database is "
                        "free pages; a defragment returns them",
                        "# one member at a time: the member blocks while it defragments\n"
                        f"{etcdctl(None if metrics_only else m.url, tls)} defrag",
                    )
                )
        out.extend(_versions(cluster.name, answering))
        counts = state.keys.get(cluster.name, ({}, 0))[0]
        events = counts.get("events", 0)
        others = sum(v for k, v in counts.items() if k != "events")
        if events and others:
            out.append(
                Finding(
                    "warning",
                    f"etcd {cluster.name}: holds {events:,} event keys "
                    f"({events / (events + others):.0%} of {events + others:,}) beside the "
                    "cluster's objects",
                    "Events churn and fill the database; give them their own etcd cluster:\n"
                    "kube-apiserver --etcd-servers-overrides=/events#https://EVENTS-ETCD:2379\n"
                    "(and watch it here with --etcd.cluster events=https://EVENTS-ETCD:2379)",
                )
            )
        elif counts:
            total = sum(counts.values())
            out.append(
                Finding(
                    "info",
                    f"etcd {cluster.name}: {total:,} keys in "
                    f"{len(counts)} resources, largest "
                    f"{max(counts, key=counts.get)}",
                )
            )
    return out
