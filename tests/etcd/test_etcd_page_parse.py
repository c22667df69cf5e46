"""page.parse on hand-made sample lines: what is kept of a page, and what makes it an error."""

import pytest

from kube_scale_exporter.etcd.page import MetricsError, parse

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
