"""Disk latency and read load per member, re-exported from real etcd of every version the
tests run (conftest.version), etcd 3.7's streamed range counted as a read, and a member
whose /metrics fails alone."""

import base64
import logging
import time

import pytest

from kube_scale_exporter.collectors.etcd.advice import advise
from kube_scale_exporter.etcd.page import BUCKETS
from testbed.etcd_server import etcd_metric, put_many, range_stream
from testbed.golden import promtool_check, render, series_count
from testbed.kube_apiserver import apiserver_on_new_etcd

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


@pytest.mark.parametrize("version,answer", [("3.6", "12"), ("3.7", "0")])
def test_a_streamed_range_is_a_read_from_37(etcd_factory, collector_factory, version, answer):
    """etcd 3.7's RangeStream (gRPC only; kube-apiserver 1.37 LISTs through it wherever
    etcd has it) is counted beside Range, and its bytes are in the bytes sent. etcd 3.6
    answers it UNIMPLEMENTED (12) and counts nothing."""
    etcd = etcd_factory(version=version)
    load(etcd, lists=0)
    collector = collector_factory(
        "--etcd.cluster", f"main={etcd.client_url}", "--etcd.min-interval", "0.05"
    )
    before = perf_samples(collector.families(collector.observe()), "default")
    replies = [range_stream(etcd, "/registry/") for _ in range(5)]
    time.sleep(0.1)  # past --etcd.min-interval
    state = collector.observe()
    after = perf_samples(collector.families(state), "default")
    reads = (
        after[("kubescale_etcd_range_requests_total", None)]
        - before[("kubescale_etcd_range_requests_total", None)]
    )
    sent = (
        after[("kubescale_etcd_client_sent_bytes_total", None)]
        - before[("kubescale_etcd_client_sent_bytes_total", None)]
    )
    assert {code for code, _ in replies} == {answer}
    if answer == "0":
        # 300 pods of ~1 KB in each of the five streams, each counted once.
        assert all(size > 300 * 1000 for _, size in replies)
        assert reads == 5 and sent > 5 * 300 * 1000
    else:
        assert reads == 0
    # Nothing on the page the exporter does not know, on either version.
    assert not [f.summary for f in advise(state) if "/metrics" in f.summary or "KV" in f.summary]


def kv_reads(member) -> dict[str, float]:
    """grpc_server_handled_total of KV Range and RangeStream on the member's page, summed
    over grpc_code: {method: count}."""
    counts = {"Range": 0.0, "RangeStream": 0.0}
    for line in member.session().get(member.client_url + "/metrics", timeout=10).text.split("\n"):
        if line.startswith("grpc_server_handled_total{") and "etcdserverpb.KV" in line:
            method = line.split('grpc_method="')[1].split('"')[0]
            if method in counts:
                counts[method] += float(line.rsplit(" ", 1)[1])
    return counts


def test_kube_apiserver_137_lists_etcd_37_through_rangestream_and_it_is_counted(
    tmp_path, collector_factory
):
    """What users of 1.37 on 3.7 see: the API server's LISTs (its watch cache's, from its
    start) go to etcd as RangeStream, not Range; the read count holds them."""
    with apiserver_on_new_etcd(tmp_path / "api", etcd_version="3.7") as api:
        before = kv_reads(api.etcd)
        collector = collector_factory("--etcd.cluster", f"main={api.etcd.client_url}")
        got = perf_samples(collector.families(collector.observe()), "default")
        after = kv_reads(api.etcd)
    print(f"kube-apiserver 1.37 on etcd 3.7, KV reads handled: {after}")
    assert before["RangeStream"] > 0
    ours = got[("kubescale_etcd_range_requests_total", None)]
    assert before["Range"] + before["RangeStream"] <= ours <= after["Range"] + after["RangeStream"]
    assert ours > after["Range"]  # Range alone would have missed the streamed LISTs


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
    members = etcd_factory.cluster(size=3, version="3.7", own_hosts=True, metrics_ports=True)
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
