"""Hostile etcd answers: whatever a member (or something pretending to be one) sends back,
the client returns well-typed values or raises EtcdError, and the collector neither dies
nor stays poisoned once the answers are sane again.

A real etcd answers behind the fault proxy; the proxy replaces one answer at a time with
a generated document (etcd itself only ever sends well-formed ones).
"""

import base64
import json
import math
import threading
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kube_scale_exporter.cli import parse
from kube_scale_exporter.collectors.etcd import EtcdCollector
from kube_scale_exporter.etcd.answers import Member, Status
from kube_scale_exporter.etcd.client import EtcdClient, EtcdError, TLSFiles, new_session
from kube_scale_exporter.etcd import page as etcd_page
from kube_scale_exporter.etcd.metrics_only import status_of
from kube_scale_exporter.etcd.page import QUOTA as QUOTA_METRIC
from kube_scale_exporter.etcd.page import MetricsError
from testbed.etcd_server import EtcdServer
from testbed.faultproxy import FaultProxy
from testbed.metrics import collect, sample

pytestmark = pytest.mark.integration

SETTINGS = settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=False)
    | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4)
    ),
    max_leaves=12,
)
# Right field names with wrong, huge, negative or missing values: what a buggy gateway,
# another version or a hostile peer might send.
numbers = (
    st.integers(-(2**70), 2**70)
    | st.integers(0, 2**64).map(str)
    | st.sampled_from(["", "1e9", "0x10", "-1", "NaN", " 7", "١٢"])
    | json_values
)
status_docs = st.fixed_dictionaries(
    {},
    optional={
        "header": st.fixed_dictionaries({}, optional={"member_id": numbers}) | json_values,
        "leader": numbers,
        "version": json_values,
        "dbSize": numbers,
        "dbSizeInUse": numbers,
        "dbSizeQuota": numbers,
        "raftTerm": numbers,
        "raftAppliedIndex": numbers,
    },
)
member_docs = st.fixed_dictionaries(
    {},
    optional={
        "members": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "ID": numbers,
                    "name": json_values | st.text(max_size=300),
                    "clientURLs": json_values | st.lists(st.text(max_size=40)),
                },
            )
            | json_values,
            max_size=4,
        )
        | json_values
    },
)
alarm_docs = st.fixed_dictionaries(
    {},
    optional={
        "alarms": st.lists(
            st.fixed_dictionaries({}, optional={"memberID": numbers, "alarm": json_values})
            | json_values,
            max_size=4,
        )
        | json_values
    },
)
range_docs = st.fixed_dictionaries(
    {},
    optional={
        "count": numbers,
        "kvs": st.lists(
            st.fixed_dictionaries(
                {},
                optional={
                    "key": st.binary(max_size=20).map(lambda b: base64.b64encode(b).decode())
                    | json_values
                },
            )
            | json_values,
            max_size=2,
        )
        | json_values,
    },
)


def bodies(docs):
    return (docs | json_values).map(lambda d: json.dumps(d).encode()) | st.binary(max_size=200)


@pytest.fixture(scope="module")
def etcd(tmp_path_factory):
    server = EtcdServer(tmp_path_factory.mktemp("etcd")).start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(etcd):
    p = FaultProxy(etcd.client_url).start()
    yield p
    p.stop()


@pytest.fixture(scope="module")
def client(proxy):
    return EtcdClient(new_session(TLSFiles()), proxy.url, timeout=5)


def answered(proxy, path, body, call):
    """call() while the proxy answers `path` once with body; the result or the EtcdError."""
    proxy.clear()
    proxy.inject(path, status=200, body=body, headers={"Content-Type": "application/json"}, times=1)
    try:
        return call()
    except EtcdError as exc:
        return exc
    finally:
        proxy.clear()


@SETTINGS
@given(body=bodies(status_docs))
def test_status_is_well_typed_or_an_etcd_error(proxy, client, body):
    got = answered(proxy, "/v3/maintenance/status", body, client.status)
    if isinstance(got, Status):
        for n in (
            got.db_size,
            got.db_size_in_use,
            got.db_size_quota,
            got.raft_term,
            got.raft_applied_index,
        ):
            assert isinstance(n, int) and 0 <= n < 2**64
        assert got.member_id.isdigit() and got.leader_id.isdigit()
    else:
        assert isinstance(got, EtcdError)


@SETTINGS
@given(body=bodies(member_docs))
def test_members_are_well_typed_with_safe_labels(proxy, client, body):
    got = answered(proxy, "/v3/cluster/member/list", body, client.members)
    if isinstance(got, EtcdError):
        return
    for m in got:
        assert isinstance(m, Member) and m.id.isdigit()
        assert all(isinstance(u, str) for u in m.client_urls)
        label = m.label
        assert 0 < len(label) <= 63 and label.isascii() and label.isprintable()
        assert '"' not in label and "\\" not in label and "\n" not in label


@SETTINGS
@given(body=bodies(alarm_docs))
def test_alarms_are_well_typed(proxy, client, body):
    got = answered(proxy, "/v3/maintenance/alarm", body, client.alarms)
    if not isinstance(got, EtcdError):
        assert all(a.member_id.isdigit() and isinstance(a.alarm, str) for a in got)


@SETTINGS
@given(body=bodies(range_docs))
def test_range_answers_are_well_typed(proxy, client, body):
    count = answered(proxy, "/v3/kv/range", body, lambda: client.count(b"/a/", b"/a0"))
    assert isinstance(count, EtcdError) or (isinstance(count, int) and count >= 0)
    key = answered(proxy, "/v3/kv/range", body, lambda: client.first_key(b"/a/", b"/a0"))
    assert isinstance(key, EtcdError) or key is None or b"/a/" <= key < b"/a0"


def pages(lines, max_size):
    """Pages of sample lines: hostile variants of etcd's own among random text."""
    return st.lists(st.sampled_from(lines) | st.text(max_size=60), max_size=max_size)


def read_page(proxy, client, page, wanted):
    """What the collector keeps of `page` served as the member's /metrics; a page that is
    not etcd's is a MetricsError, returned like an EtcdError."""

    def parse_page():
        try:
            return etcd_page.parse(client.metric_lines(wanted))
        except MetricsError as exc:
            return exc

    return answered(proxy, "/metrics", "\n".join(page).encode("utf-8", "replace"), parse_page)


QUOTA_LINES = [
    f"{QUOTA_METRIC} 1e400",
    f"{QUOTA_METRIC} NaN",
    f"{QUOTA_METRIC} -5",
    f"{QUOTA_METRIC} +Inf",
    f"{QUOTA_METRIC}",
    f"{QUOTA_METRIC} 12 34",
    f"{QUOTA_METRIC} ab",
    f'{QUOTA_METRIC}{{a="b"}} 3',
    "# HELP x",
    "",
    "\x00\xff",
    f"{QUOTA_METRIC} 2147483648",
]
# What --etcd.local-access=metrics reads in Status's place.
STATUS_LINES = [
    'etcd_server_id{server_id="2e1d73757f4e501b"} 1',
    'etcd_server_id{server_id="zz"} 1',
    'etcd_server_id{server_id="12345678901234567890"} 1',
    'etcd_server_id{server_id="2e1d73757f4e501b"} NaN',
    "etcd_mvcc_db_total_size_in_bytes 1.7e+07",
    "etcd_mvcc_db_total_size_in_bytes 1e400",
    "etcd_mvcc_db_total_size_in_use_in_bytes -1",
    "etcd_server_is_leader 1",
    "etcd_server_is_leader 7",
    "etcd_server_proposals_applied_total 40",
    'etcd_server_version{server_version="3.5.30\x00"} 1',
    'grpc_server_handled_total{grpc_code="ResourceExhausted",grpc_method="Txn",'
    'grpc_service="etcdserverpb.KV",grpc_type="unary"} 3',
]


@SETTINGS
@given(page=pages(QUOTA_LINES, 8))
def test_metrics_page_gives_a_finite_sample_none_or_an_error(proxy, client, page):
    got = read_page(proxy, client, page, etcd_page.WANTED)
    if not isinstance(got, (EtcdError, MetricsError)):
        assert got.quota_bytes is None or (math.isfinite(got.quota_bytes) and got.quota_bytes >= 0)


@SETTINGS
@given(page=pages(STATUS_LINES, 10))
def test_metrics_only_page_gives_a_well_typed_status_or_an_error(proxy, client, page):
    got = read_page(proxy, client, page, etcd_page.WANTED_WITHOUT_STATUS)
    if not isinstance(got, (EtcdError, MetricsError)):
        try:
            got = status_of(got)
        except MetricsError:
            return
        assert got.raft_term is None
        for n in (got.db_size, got.db_size_in_use, got.raft_applied_index):
            assert isinstance(n, int) and 0 <= n < 2**63
        assert got.member_id.isdigit() and int(got.member_id) < 2**64
        assert got.leader_id in (got.member_id, "0")


def test_collector_outlives_hostile_answers_and_recovers(proxy):
    args, classes = parse(
        [
            "--mode",
            "cluster",
            "--etcd.cluster",
            f"main={proxy.url}",
            "--etcd.timeout",
            "2",
            "--etcd.min-interval",
            "0.01",
            "--etcd.keys-interval",
            "0.2",
        ]
    )
    (collector,) = [cls(args) for cls in classes if cls is EtcdCollector]
    collector.start()
    try:
        junk = [
            b"[]",
            b"null",
            b'{"members": [{"ID": "x"}]}',
            b'{"kvs": [{"key": 5}]}',
            b'{"header": {"member_id": {"a": 1}}}',
            b'{"count": "-3"}',
            b"\xff\xfe",
            b'{"kvs": [{"key": "////"}]}',
            b'{"dbSize": 1e999}',
        ]
        for body in junk:
            proxy.clear()
            proxy.inject(r"/v3/", status=200, body=body)
            proxy.inject(r"/metrics", status=200, body=body)
            try:
                collect(collector)
            except EtcdError:
                pass
        proxy.clear()
        time.sleep(0.05)  # past --etcd.min-interval: a fresh refresh, not the cached failure
        families = collect(collector)
        assert sample(families, "kubescale_etcd_up", etcd_cluster="main") == 1
        # The background key count survived the junk and counts again.
        keys_thread = [t for t in threading.enumerate() if t.name == "etcd-keys"]
        assert keys_thread and keys_thread[0].is_alive()
        collector._keys_counted.clear()
        assert collector._keys_counted.wait(10)
    finally:
        collector.close()
