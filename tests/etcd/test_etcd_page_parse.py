"""page.parse on hand-made sample lines: what is kept of a page, and what makes it an error."""

import pytest

from kube_scale_exporter.etcd.page import MetricsError, parse

pytestmark = pytest.mark.unit

FSYNC = "etcd_disk_wal_fsync_duration_seconds_bucket"
BOUNDS = [
    "0.001",
    "0.002",
    "0.004",
    "0.008",
    "0.016",
    "0.032",
    "0.064",
    "0.128",
    "0.256",
    "0.512",
    "+Inf",
]


def page(*lines):
    return [line.encode() for line in lines]


def hist(name, counts, bounds=BOUNDS):
    return [f'{name}{{le="{b}"}} {c}' for b, c in zip(bounds, counts, strict=True)]


def test_etcds_buckets_are_kept_at_our_bounds_exactly():
    got = parse(page(*hist(FSYNC, [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11])))
    assert got.fsync.buckets() == [
        ("0.002", 2),
        ("0.008", 4),
        ("0.016", 5),
        ("0.032", 6),
        ("0.256", 9),
        ("+Inf", 11),
    ]
    assert got.commit is None and got.sent_bytes is None and got.quota_bytes is None


def test_other_bounds_take_the_count_of_the_largest_bound_below():
    got = parse(page(*hist(FSYNC, [5, 7, 9, 10], bounds=["0.005", "0.01", "0.1", "+Inf"])))
    # 0.002: nothing at or below it; 0.008 and 0.016 take 0.005's and 0.01's counts.
    assert [c for _, c in got.fsync.buckets()] == [0, 5, 7, 7, 9, 10]


def test_range_requests_sum_every_code_of_kv_range_only():
    got = parse(
        page(
            'grpc_server_handled_total{grpc_code="OK",grpc_method="Range",'
            'grpc_service="etcdserverpb.KV",grpc_type="unary"} 40',
            'grpc_server_handled_total{grpc_code="Unavailable",grpc_method="Range",'
            'grpc_service="etcdserverpb.KV",grpc_type="unary"} 2',
            'grpc_server_handled_total{grpc_code="OK",grpc_method="Txn",'
            'grpc_service="etcdserverpb.KV",grpc_type="unary"} 99',
            "etcd_network_client_grpc_sent_bytes_total 1.5e+09",
            "etcd_server_quota_backend_bytes 2.147483648e+09",
        )
    )
    assert (got.range_requests, got.sent_bytes, got.quota_bytes) == (42, 1.5e9, 2**31)


@pytest.mark.parametrize(
    "lines",
    [
        [f'{FSYNC}{{le="0.002"}} NaN', f'{FSYNC}{{le="+Inf"}} 1'],
        [f'{FSYNC}{{le="0.002"}} 5', f'{FSYNC}{{le="+Inf"}} 1'],  # not cumulative
        [f'{FSYNC}{{le="x"}} 5', f'{FSYNC}{{le="+Inf"}} 5'],
        [f"{FSYNC}{{}} 5"],
        ["etcd_network_client_grpc_sent_bytes_total -1"],
        ["etcd_network_client_grpc_sent_bytes_total abc"],
    ],
)
def test_samples_that_are_not_etcds_are_an_error(lines):
    with pytest.raises(MetricsError):
        parse(page(*lines))


def test_a_histogram_without_inf_is_left_out():
    assert parse(page(f'{FSYNC}{{le="0.002"}} 5')).fsync is None


def handled(code, method, service="etcdserverpb.KV", n=1):
    return (
        f'grpc_server_handled_total{{grpc_code="{code}",grpc_method="{method}",'
        f'grpc_service="{service}",grpc_type="unary"}} {n}'
    )


def test_writes_refused_sum_put_txn_and_lease_grants_resource_exhausted_only():
    got = parse(
        page(
            handled("ResourceExhausted", "Put", n=2),
            handled("ResourceExhausted", "Txn", n=3),
            handled("ResourceExhausted", "Range", n=50),  # reads are never refused for space
            handled("ResourceExhausted", "LeaseGrant", "etcdserverpb.Lease", n=7),
            handled("ResourceExhausted", "LeaseRevoke", "etcdserverpb.Lease", n=13),
            handled("InvalidArgument", "Put", n=11),  # request too large: the client's fault
            handled("OK", "Txn", n=99),
        )
    )
    assert (got.writes_refused, got.range_requests) == (12, 50)


def test_the_samples_standing_for_status():
    got = parse(
        page(
            "etcd_mvcc_db_total_size_in_bytes 1.7375232e+07",
            "etcd_mvcc_db_total_size_in_use_in_bytes 1.2648448e+07",
            "etcd_server_is_leader 1",
            "etcd_server_proposals_applied_total 40",
            'etcd_server_id{server_id="2e1d73757f4e501b"} 1',
            'etcd_server_version{server_version="3.4.23"} 1',
        )
    )
    assert (got.db_size, got.db_size_in_use, got.is_leader, got.applied_index) == (
        17375232,
        12648448,
        1,
        40,
    )
    assert (got.member_id, got.version) == ("2e1d73757f4e501b", "3.4.23")


@pytest.mark.parametrize(
    "line",
    [
        "etcd_server_is_leader 7",
        'etcd_server_id{server_id="not-hex"} 1',
        'etcd_server_id{server_id="12345678901234567"} 1',  # 17 hex digits: over 64 bits
        "etcd_mvcc_db_total_size_in_bytes -1",
    ],
)
def test_status_samples_that_are_not_etcds_are_an_error(line):
    with pytest.raises(MetricsError):
        parse(page(line))
