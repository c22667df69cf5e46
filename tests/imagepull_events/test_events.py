"""Cluster mode: pull-time and queue-wait histograms from Pulled events.

Parsing and the golden exposition from fixed messages; then a real kube-apiserver,
where the test writes the events the kubelet would.
"""

import time
import uuid

import pytest

from kube_scale_exporter.collectors.imagepull_events import (
    PulledEvents,
    families,
    parse_pulled,
)
from kube_scale_exporter.durations import go_duration
from kube_scale_exporter.pullfailures import FailureCounts, RegistryLabels
from testbed.golden import assert_golden
from testbed.metrics import collect, sample


@pytest.mark.unit
@pytest.mark.parametrize(
    "text,seconds",
    [
        ("0", 0),
        ("0s", 0),
        ("812ms", 0.812),
        ("1m2.5s", 62.5),
        ("1h0m0s", 3600),
        ("1.5µs", 1.5e-6),
        ("250us", 2.5e-4),
    ],
)
def test_go_durations(text, seconds):
    assert go_duration(text) == pytest.approx(seconds)


@pytest.mark.unit
@pytest.mark.parametrize("bad", ["", "1", "1x", "s", "1m 2s"])
def test_not_go_durations(bad):
    with pytest.raises(ValueError):
        go_duration(bad)


@pytest.mark.unit
@pytest.mark.parametrize(
    "message,parsed",
    [
        (
            'Successfully pulled image "nginx:1.25" in 2.035s (2.035s including waiting)',
            (2.035, 0.0),
        ),
        (
            (
                'Successfully pulled image "big:v3" in 29m12.5s (41m0s including waiting). '
                "Image size: 17179869184 bytes."
            ),
            (1752.5, 707.5),
        ),
        ('Successfully pulled image "nginx" in 812ms', (0.812, None)),  # kubelet < 1.28
        ('Container image "nginx" already present on machine', None),
        ('Pulling image "nginx"', None),
        # client-go's recorder, from the 10th distinct Pulled message about one pod:
        (
            '(combined from similar events): Successfully pulled image "app:7" in 4.2s '
            "(1m4.2s including waiting). Image size: 52428800 bytes.",
            (4.2, 60.0),
        ),
        # ... the prefix once, at the start, as it writes it; nothing else is stripped.
        ('(combined from similar events): Container image "nginx" already present', None),
        (
            "(combined from similar events): (combined from similar events): "
            'Successfully pulled image "a" in 1s',
            None,
        ),
        ('(combined from similar events):Successfully pulled image "a" in 1s', None),
        (' (combined from similar events): Successfully pulled image "a" in 1s', None),
    ],
)
def test_pulled_messages(message, parsed):
    got = parse_pulled(message)
    assert got == (None if parsed is None else pytest.approx(parsed))


def event(message, created="2027-01-15T08:00:00Z", count=1, name="e"):
    return {
        "metadata": {"name": name, "namespace": "default", "creationTimestamp": created},
        "message": message,
        "count": count,
    }


@pytest.mark.unit
def test_golden_exposition():
    failures = FailureCounts(0, RegistryLabels(10), clock=lambda: 0.0)
    events = PulledEvents(since=0, failures=failures)
    for i, message in enumerate(
        (
            'Failed to pull image "nginx:1.25": rpc error: code = Unknown desc = failed to pull '
            'and unpack image "docker.io/library/nginx:1.25": failed to copy: httpReadSeeker: '
            "failed open: unexpected status code https://registry-1.docker.io/v2/library/nginx/"
            "manifests/1.25: 429 Too Many Requests - Server message: toomanyrequests: You have "
            "reached your pull rate limit.",
            'Failed to pull image "ghcr.io/x/app:9": rpc error: code = NotFound desc = failed to '
            'pull and unpack image "ghcr.io/x/app:9": failed to resolve reference '
            '"ghcr.io/x/app:9": ghcr.io/x/app:9: not found',
            "Error: ErrImagePull",
        )
    ):
        failures.on_add(event(message, name=f"f{i}") | {"source": {"host": f"node-{i}"}})
    for message in (
        'Successfully pulled image "pause:3.9" in 412ms (412ms including waiting)',
        'Successfully pulled image "nginx:1.25" in 3.2s (1m0.2s including waiting)',
        'Successfully pulled image "big:v3" in 29m12.5s (41m0s including waiting)',
        'Successfully pulled image "old:1" in 8s',
        'Container image "pause:3.9" already present on machine',
    ):
        events.on_add(event(message))
    repeated = event('Successfully pulled image "app:2" in 20s (20s including waiting)')
    events.on_add(repeated)
    events.on_update(repeated, dict(repeated, count=3))
    assert_golden("imagepull_events", families(events.snapshot()))


COMBINED = "(combined from similar events): "


@pytest.mark.unit
def test_a_combined_event_counts_each_rise_of_its_count_with_its_newest_message():
    failures = FailureCounts(0, RegistryLabels(10))
    events = PulledEvents(since=0, failures=failures)
    first = event(COMBINED + 'Successfully pulled image "a:9" in 4s (6s including waiting)')
    events.on_add(first)
    second = dict(first, count=2, message=COMBINED + 'Successfully pulled image "a:10" in 10s')
    events.on_update(first, second)
    # Up by two: the pull the recorder held back is taken to be like the newest.
    third = dict(
        second,
        count=4,
        message=COMBINED + 'Successfully pulled image "ghcr.io/b:1" in 30s (31s including waiting)',
    )
    events.on_update(second, third)
    present = dict(third, count=5, message=COMBINED + 'Container image "a:9" already present')
    events.on_update(third, present)
    got = families(events.snapshot())
    assert sample(got, "kubescale_image_pull_duration_seconds_count") == 4
    assert sample(got, "kubescale_image_pull_duration_seconds_sum") == 4 + 10 + 2 * 30
    assert sample(got, "kubescale_image_pull_queue_wait_seconds_count") == 3
    assert sample(got, "kubescale_image_pull_queue_wait_seconds_sum") == 2 + 2 * 1
    assert sample(got, "kubescale_image_pulls_succeeded_total", registry="docker.io") == 2
    assert sample(got, "kubescale_image_pulls_succeeded_total", registry="ghcr.io") == 2


@pytest.mark.unit
def test_events_from_before_the_start_do_not_count():
    events = PulledEvents(since=1_800_000_000.0)  # 2027-01-15T08:00:00Z
    events.on_add(event('Successfully pulled image "a" in 1s', created="2027-01-15T07:59:59Z"))
    events.on_add(event('Successfully pulled image "a" in 1s', created="2027-01-15T08:00:00Z"))
    assert sample(families(events.snapshot()), "kubescale_image_pull_duration_seconds_count") == 1


def post_event(api, ns, reason, message, count=1, host="node-a"):
    name = "ev-" + uuid.uuid4().hex[:10]
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    api.admin.create(
        f"/api/v1/namespaces/{ns}/events",
        {
            "metadata": {"name": name},
            "involvedObject": {"kind": "Pod", "name": "p", "namespace": ns},
            "reason": reason,
            "message": message,
            "type": "Normal",
            "count": count,
            "firstTimestamp": now,
            "lastTimestamp": now,
            "source": {"component": "kubelet", "host": host},
        },
    )
    return name


def recorder_patch(api, ns, name, count, message):
    """What client-go's recorder sends for a later similar event: a strategic merge patch
    of count, lastTimestamp and message (tools/record, eventObserve)."""
    now = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    api.admin.request(
        "PATCH",
        f"/api/v1/namespaces/{ns}/events/{name}",
        {"count": count, "lastTimestamp": now, "message": message},
        content_type="application/strategic-merge-patch+json",
    )


@pytest.mark.integration
def test_histograms_from_pulled_events_in_a_real_apiserver(apiserver, namespace, events_collector):
    post_event(
        apiserver,
        namespace,
        "Pulled",
        'Successfully pulled image "before" in 5s (5s including waiting)',
    )
    time.sleep(1.1)  # creationTimestamp has whole seconds
    c = events_collector()
    assert sample(collect(c), "kubescale_image_pull_duration_seconds_count") == 0
    post_event(
        apiserver,
        namespace,
        "Pulled",
        'Successfully pulled image "a" in 45s (3m0s including waiting)',
    )
    post_event(apiserver, namespace, "Pulled", 'Successfully pulled image "b" in 2s')
    post_event(apiserver, namespace, "Pulled", 'Container image "c" already present on machine')
    post_event(apiserver, namespace, "Pulling", 'Pulling image "d"')
    repeated = post_event(
        apiserver,
        namespace,
        "Pulled",
        'Successfully pulled image "e" in 1s (1s including waiting)',
    )
    apiserver.admin.merge_patch(f"/api/v1/namespaces/{namespace}/events/{repeated}", {"count": 3})
    deadline = time.monotonic() + 10
    while True:
        families = collect(c)
        if sample(families, "kubescale_image_pull_duration_seconds_count") == 5:
            break
        assert time.monotonic() < deadline, [(s.name, s.value) for f in families for s in f.samples]
        time.sleep(0.1)
    assert sample(families, "kubescale_image_pull_duration_seconds_sum") == 45 + 2 + 3 * 1
    assert sample(families, "kubescale_image_pull_queue_wait_seconds_count") == 4
    assert sample(families, "kubescale_image_pull_queue_wait_seconds_sum") == 135
    assert sample(families, "kubescale_image_pull_queue_wait_seconds_bucket", le="120.0") == 3
