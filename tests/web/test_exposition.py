"""Our encoders against prometheus_client 0.26's, byte for byte, on the same families.

Each family is built twice by the same calls, once with kube_scale_exporter.metrics and
once with prometheus_client's families, and both encodings must be equal for every
format and name escaping a scraper can ask for, hostile label values and HELP included.
"""

import math

import prometheus_client.core as peer
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, GCCollector, PlatformCollector, ProcessCollector
from prometheus_client.exposition import choose_encoder as peer_choose_encoder
from prometheus_client.exposition import generate_latest
from prometheus_client.openmetrics.exposition import generate_latest as peer_openmetrics

from kube_scale_exporter import metrics
from kube_scale_exporter.process import ProcessMetrics
from kube_scale_exporter.web.exposition import (
    ESCAPINGS,
    choose_encoder,
    encode_openmetrics,
    encode_text,
    go_float,
)

pytestmark = pytest.mark.unit


class Collected:
    """prometheus_client's encoders read a registry: anything with collect()."""

    def __init__(self, families):
        self.families = families

    def collect(self):
        return iter(self.families)


def peer_text(families, escaping="underscores"):
    return generate_latest(Collected(families), escaping=escaping)


def peer_om(families, escaping="underscores"):
    return peer_openmetrics(Collected(families), escaping=escaping)


HOSTILE = [
    "",
    'quote"inside',
    "back\\slash",
    "new\nline",
    "\\n literally",
    'all \\ " \n three',
    "ünïcödé ✓ 日本",
    "tab\there\r",
    "# HELP not a comment",
    "} close brace {",
    'le="+Inf"',
    "\x00nul",
]

NAMES = st.from_regex(r"[a-zA-Z_][a-zA-Z0-9_]{0,20}", fullmatch=True)
LABEL_NAMES = NAMES.filter(lambda n: not n.startswith("__") and n != "le")
VALUES = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True),
    st.integers(min_value=-(2**63), max_value=2**63),
    st.sampled_from([0, 1, -0.0, 1e7, 1e-7, 12345678.9, 123456789012345678, 0.1 + 0.2]),
)
TEXT = st.one_of(st.sampled_from(HOSTILE), st.text(max_size=30))


@st.composite
def family_calls(draw):
    """(kind, name, help, label names, [(label values, value or buckets)])."""
    kind = draw(st.sampled_from(["gauge", "counter", "histogram"]))
    name = draw(NAMES)
    if kind == "counter" and draw(st.booleans()):
        name += "_total"
    labels = draw(st.lists(LABEL_NAMES, max_size=3, unique=True))
    series = []
    for _ in range(draw(st.integers(0, 3))):
        values = [draw(TEXT) for _ in labels]
        if kind == "histogram":
            bounds = sorted(draw(st.lists(st.floats(0, 1e9), max_size=4, unique=True)))
            counts = sorted(
                draw(
                    st.lists(
                        st.integers(0, 10**6), min_size=len(bounds) + 1, max_size=len(bounds) + 1
                    )
                )
            )
            buckets = list(zip([*map(go_float, bounds), "+Inf"], counts, strict=True))
            sum_value = draw(st.one_of(st.none(), st.floats(0, 1e12)))
            series.append((values, (buckets, sum_value)))
        else:
            series.append((values, draw(VALUES)))
    return kind, name, draw(TEXT), labels, series


def build(module, kind, name, doc, labels, series):
    constructor = {
        "gauge": (metrics.GaugeFamily, peer.GaugeMetricFamily),
        "counter": (metrics.CounterFamily, peer.CounterMetricFamily),
        "histogram": (metrics.HistogramFamily, peer.HistogramMetricFamily),
    }[kind][module is peer]
    family = constructor(name, doc, labels=labels)
    for values, value in series:
        if kind == "histogram":
            family.add_metric(values, *value)
        else:
            family.add_metric(values, value)
    return family


def both(calls):
    return [build(metrics, *c) for c in calls], [build(peer, *c) for c in calls]


@settings(max_examples=300, deadline=None)
@given(st.lists(family_calls(), max_size=5), st.sampled_from(sorted(ESCAPINGS)))
def test_both_formats_equal_prometheus_clients_for_any_families(calls, escaping):
    ours, theirs = both(calls)
    assert encode_text(ours, escaping) == peer_text(theirs, escaping)
    assert encode_openmetrics(ours, escaping) == peer_om(theirs, escaping)


def test_hostile_label_values_and_help_are_escaped_as_prometheus_client_does():
    calls = [
        (
            "gauge",
            "kubescale_hostile",
            doc,
            ["registry", "reason"],
            [([v, v[::-1]], 1) for v in HOSTILE],
        )
        for doc in HOSTILE
    ]
    ours, theirs = both(calls)
    text = encode_text(ours)
    assert text == peer_text(theirs)
    assert encode_openmetrics(ours) == peer_om(theirs)
    # Each sample stays on its line: no raw newline from a value or HELP text.
    assert text.count(b"\n") == len(HOSTILE) * (2 + len(HOSTILE))
    assert b'registry="quote\\"inside"' in text and b'"new\\nline"' in text


@pytest.mark.parametrize(
    "value, expected",
    [
        (float("inf"), "+Inf"),
        (float("-inf"), "-Inf"),
        (float("nan"), "NaN"),
        (3, "3.0"),
        (0, "0.0"),
        (-0.0, "-0.0"),
        (10_000_000, "1e+07"),
        (12_345_678.5, "1.23456785e+07"),
        (1_000_000, "1e+06"),
        (999_999, "999999.0"),
        (2.5e-7, "2.5e-07"),
        (1e16, "1e+16"),
        (-12_345_678.0, "-12345678.0"),
    ],
)
def test_values_print_as_go_does(value, expected):
    assert go_float(value) == expected
    if not (isinstance(value, float) and math.isnan(value)):
        family = metrics.GaugeFamily("kubescale_v", "v", value=value)
        assert encode_text([family]) == peer_text(
            [peer.GaugeMetricFamily("kubescale_v", "v", value=value)]
        )


# What Prometheus 2.x and 3.x send, what curl and browsers send, and odd or broken ones.
ACCEPTS = [
    None,
    "",
    "*/*",
    "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8",
    "application/openmetrics-text; version=1.0.0",
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "application/vnd.google.protobuf;proto=io.prometheus.client.MetricFamily;encoding=delimited;q=0.7,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.6,application/openmetrics-text;version=0.0.1;q=0.5,text/plain;version=1.0.0;escaping=allow-utf-8;q=0.4,text/plain;version=0.0.4;q=0.3,*/*;q=0.2",
    "application/openmetrics-text;version=1.0.0;escaping=underscores",
    "application/openmetrics-text;version=1.0.0;escaping=dots",
    "application/openmetrics-text;version=1.0.0;escaping=values",
    "application/openmetrics-text;version=2.0.0;escaping=bogus",
    "application/openmetrics-text",
    "application/openmetrics-text; q=0.1",
    "application/openmetrics-text;version=0.0.1",
    "application/openmetrics-text;version=0.0.1,text/plain;version=1.0.0;escaping=dots",
    "text/plain",
    "text/plain;version=0.0.4",
    "text/plain;version=1.0.0",
    "text/plain;version=1.0.0;escaping=values",
    "text/plain; version=1.0.0 ; escaping=dots",
    "text/plain;version=1",
    "text/plain;version=2",
    "text/plain;version=1.0",
    "text/plain;version=1.0.0.1",
    "text/plain;version=0.x",
    "text/plain;version=10.0.0",
    "TEXT/PLAIN;version=1.0.0",
    "  application/openmetrics-text  ;  version=1.0.0  ",
    "application/openmetrics-text;version =1.0.0",
    "application/openmetrics-text;escaping=dots;version=1.0.0;version=0.0.1",
    ",,;;==",
]


def sample_families():
    calls = [
        (
            "counter",
            "kubescale_pull_failures_total",
            'Failed "pulls".\nBy cause.',
            ["registry"],
            [(["docker.io"], 3)],
        ),
        ("gauge", "kubescale_up", "Up.", [], [([], 1)]),
        (
            "histogram",
            "kubescale_wait_seconds",
            "Wait.",
            ["phase"],
            [(["a_b"], ([("0.5", 1), ("+Inf", 4)], 2.5))],
        ),
    ]
    return both(calls)


@pytest.mark.parametrize("accept", ACCEPTS)
def test_accept_negotiates_what_prometheus_client_did(accept):
    ours, theirs = sample_families()
    encoder, content_type = choose_encoder(accept)
    peer_encoder, peer_content_type = peer_choose_encoder(accept)
    assert content_type == peer_content_type
    assert encoder(ours) == peer_encoder(Collected(theirs))


@pytest.mark.parametrize(
    "accept", ["text/plain;version=1.x", "application/openmetrics-text;version=1.0.0-rc1"]
)
def test_a_version_that_is_no_number_falls_back_where_prometheus_client_failed(accept):
    with pytest.raises(TypeError):
        peer_choose_encoder(accept)
    ours, theirs = sample_families()
    encoder, content_type = choose_encoder(accept)
    assert content_type == "text/plain; version=0.0.4; charset=utf-8"
    assert encoder(ours) == peer_text(theirs)


def test_invalid_names_are_refused_when_the_family_is_built():
    for bad in ["", "1up", "with-dash", "dotted.name", "colon:name", "ünï"]:
        with pytest.raises(ValueError, match="invalid metric name"):
            metrics.GaugeFamily(bad, "x")
    with pytest.raises(ValueError, match="invalid label name"):
        metrics.GaugeFamily("kubescale_x", "x", labels=["__reserved"])
    with pytest.raises(ValueError):
        metrics.GaugeFamily("kubescale_x", "x", labels=["a", "b"]).add_metric(["only one"], 1)


def process_peer():
    registry = CollectorRegistry(auto_describe=False)
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)
    return list(registry.collect())


def test_process_gc_and_platform_series_are_prometheus_clients():
    theirs = process_peer()
    ours = ProcessMetrics().families()
    assert [(f.name, f.type, f.documentation) for f in ours] == [
        (f.name, f.type, f.documentation) for f in theirs
    ]
    ours_samples = [s for f in ours for s in f.samples]
    theirs_samples = [s for f in theirs for s in f.samples]
    assert [(s.name, s.labels) for s in ours_samples] == [
        (s.name, s.labels) for s in theirs_samples
    ]
    for mine, peers in zip(ours_samples, theirs_samples, strict=True):
        if mine.name in ("process_start_time_seconds", "process_max_fds", "python_info"):
            assert mine.value == peers.value, mine.name
        elif mine.name == "process_open_fds":
            assert abs(mine.value - peers.value) <= 2  # the test's own files may come and go
        elif mine.name.startswith("process_"):  # memory and CPU move between the two reads
            assert mine.value == pytest.approx(peers.value, rel=0.2, abs=0.5), mine.name
        else:  # gc counts: a collection may run between the two reads
            assert 0 <= mine.value - peers.value <= 1000, mine.name
    assert {s.name for s in ours_samples} >= {
        "process_resident_memory_bytes",
        "process_cpu_seconds_total",
        "python_gc_objects_collected_total",
        "python_info",
    }


def test_without_proc_there_are_no_process_series(tmp_path):
    names = [f.name for f in ProcessMetrics(proc=str(tmp_path)).families()]
    assert names == [
        "python_info",
        "python_gc_objects_collected",
        "python_gc_objects_uncollectable",
        "python_gc_collections",
    ]
