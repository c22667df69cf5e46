"""Failed pulls by registry and cause: the classes of real messages, hostile messages,
and the counters fed by Failed and Pulled events written to a real kube-apiserver."""

import time

import pytest

from kube_scale_exporter.collectors.imagepull_events import PulledEvents
from kube_scale_exporter.pullfailures import (
    FailureCounts,
    RegistryLabels,
    classify,
    failure_families,
    parse_failed,
    registry_of_pulled,
)
from testbed.golden import assert_golden
from testbed.metrics import collect, sample

from .test_events import COMBINED, event, post_event, recorder_patch

# Real messages, whole as the kubelet wrote them (event `Failed`), with where they come
# from. "here": produced on this machine by a real containerd (tests/imagepull/
# test_pull_errors.py reproduces them), wrapped as the kubelet wraps a CRI error (checked
# against a real kubelet's Failed event in tests/e2e/test_3_imagepull.py).
REAL = [
    # namespacelabs/foundation#846 (containerd, Docker Hub's anonymous limit)
    (
        'Failed to pull image "index.docker.io/jaegertracing/all-in-one@sha256:8d0bff43db3ce5c528'
        'cb6f957520511d263d7cceee012696e4afdc9087919bb9": rpc error: code = Unknown desc = failed '
        'to pull and unpack image "docker.io/jaegertracing/all-in-one@sha256:8d0bff43db3ce5c528cb'
        '6f957520511d263d7cceee012696e4afdc9087919bb9": failed to copy: httpReadSeeker: failed '
        "open: unexpected status code https://registry-1.docker.io/v2/jaegertracing/all-in-one/"
        "manifests/sha256:8d0bff43db3ce5c528cb6f957520511d263d7cceee012696e4afdc9087919bb9: 429 "
        "Too Many Requests - Server message: toomanyrequests: You have reached your pull rate "
        "limit. You may increase the limit by authenticating and upgrading: "
        "https://www.docker.com/increase-rate-limit",
        "index.docker.io",
        "rate_limited",
    ),
    # red-hat-storage/ocs-ci#4494 (CRI-O)
    (
        'Failed to pull image "obsidiandynamics/kafdrop:latest": rpc error: code = Unknown desc = '
        "Error reading manifest latest in docker.io/obsidiandynamics/kafdrop: toomanyrequests: You "
        "have reached your pull rate limit. You may increase the limit by authenticating and "
        "upgrading: https://www.docker.com/increase-rate-limit",
        "docker.io",
        "rate_limited",
    ),
    # here: containerd 1.6.20 and 2.1.9 through a proxy answering 429
    (
        'Failed to pull image "127.0.0.1:39737/app:v1": rpc error: code = Unknown desc = failed to '
        'pull and unpack image "127.0.0.1:39737/app:v1": failed to resolve reference '
        '"127.0.0.1:39737/app:v1": pulling from host 127.0.0.1:39737 failed with status code '
        "[manifests v1]: 429 Too Many Requests",
        "127.0.0.1:39737",
        "rate_limited",
    ),
    (
        'Failed to pull image "127.0.0.1:39737/app:v1": rpc error: code = Unknown desc = failed to '
        'pull and unpack image "127.0.0.1:39737/app:v1": failed to resolve image: unexpected status '
        "from HEAD request to http://127.0.0.1:39737/v2/app/manifests/v1: 429 Too Many Requests",
        "127.0.0.1:39737",
        "rate_limited",
    ),
    # here: docker-registry with htpasswd auth, containerd 1.6.20 and 2.1.9
    (
        'Failed to pull image "127.0.0.1:60685/app:v1": rpc error: code = Unknown desc = failed to '
        'pull and unpack image "127.0.0.1:60685/app:v1": failed to resolve reference '
        '"127.0.0.1:60685/app:v1": pulling from host 127.0.0.1:60685 failed with status code '
        "[manifests v1]: 401 Unauthorized",
        "127.0.0.1:60685",
        "auth",
    ),
    (
        'Failed to pull image "127.0.0.1:60685/app:v1": rpc error: code = Unknown desc = failed to '
        'pull and unpack image "127.0.0.1:60685/app:v1": failed to resolve image: pull access '
        "denied, repository does not exist or may require authorization: authorization failed: "
        "no basic auth credentials",
        "127.0.0.1:60685",
        "auth",
    ),
    # here: a missing tag, containerd 1.6.20 and 2.1.9 (the CRI answers NotFound)
    (
        'Failed to pull image "127.0.0.1:51637/app:missing": rpc error: code = NotFound desc = '
        'failed to pull and unpack image "127.0.0.1:51637/app:missing": failed to resolve '
        'reference "127.0.0.1:51637/app:missing": 127.0.0.1:51637/app:missing: not found',
        "127.0.0.1:51637",
        "not_found",
    ),
    (
        'Failed to pull image "127.0.0.1:51637/app:missing": rpc error: code = NotFound desc = '
        'failed to pull and unpack image "127.0.0.1:51637/app:missing": failed to resolve image: '
        "127.0.0.1:51637/app:missing: not found",
        "127.0.0.1:51637",
        "not_found",
    ),
    # kubernetes/kubernetes#131521: containerd's image_pull_progress_timeout cancelled it
    # ("cancel pulling image ... because of no progress in 1m0s" in containerd's log)
    (
        'Failed to pull image "private_registery.mydomain/csg/idrac_to_kafka:20250429T0012": rpc '
        'error: code = Canceled desc = failed to pull and unpack image "private_registery.mydomain'
        '/csg/idrac_to_kafka:20250429T0012": context canceled',
        "private_registery.mydomain",
        "timeout",
    ),
    # kubernetes/kubernetes#58526: dockershim's image-pull-progress-deadline
    (
        'Failed to pull image "xyz:5500/my/kibana-openshift:5.6.3": rpc error: code = 2 desc = '
        "net/http: request canceled",
        "xyz:5500",
        "timeout",
    ),
    # openabdev/openab#400
    (
        'Failed to pull image "ghcr.io/openabdev/openab:0.7.7-beta.1": rpc error: code = Canceled '
        "desc = context canceled",
        "ghcr.io",
        "timeout",
    ),
    # here: a registry that accepts the connection and never answers, containerd 1.6.20
    (
        'Failed to pull image "127.0.0.1:51495/app:v1": rpc error: code = DeadlineExceeded desc = '
        'failed to pull and unpack image "127.0.0.1:51495/app:v1": failed to resolve reference '
        '"127.0.0.1:51495/app:v1": failed to do request: context deadline exceeded',
        "127.0.0.1:51495",
        "timeout",
    ),
    # here: nothing listening, containerd 1.6.20
    (
        'Failed to pull image "127.0.0.1:56067/app:v1": rpc error: code = Unknown desc = failed to '
        'pull and unpack image "127.0.0.1:56067/app:v1": failed to resolve reference '
        '"127.0.0.1:56067/app:v1": failed to do request: Head "http://127.0.0.1:56067/v2/app/'
        'manifests/v1": dial tcp 127.0.0.1:56067: connect: connection refused',
        "127.0.0.1:56067",
        "other",
    ),
    # here: containerd 1.6.20 and 2.1.9 over HTTPS to a registry whose certificate's CA it
    # was not given (x509 from Go's tls)
    (
        'Failed to pull image "127.0.0.1:36793/app:v1": rpc error: code = Unknown desc = failed to '
        'pull and unpack image "127.0.0.1:36793/app:v1": failed to resolve reference '
        '"127.0.0.1:36793/app:v1": failed to do request: Head "https://127.0.0.1:36793/v2/app/'
        'manifests/v1": x509: certificate signed by unknown authority',
        "127.0.0.1:36793",
        "tls",
    ),
    (
        'Failed to pull image "127.0.0.1:36793/app:v1": rpc error: code = Unknown desc = failed to '
        'pull and unpack image "127.0.0.1:36793/app:v1": failed to resolve image: failed to do '
        'request: Head "https://127.0.0.1:36793/v2/app/manifests/v1": tls: failed to verify '
        "certificate: x509: certificate signed by unknown authority",
        "127.0.0.1:36793",
        "tls",
    ),
]


@pytest.mark.unit
@pytest.mark.parametrize(
    "message,registry,reason", REAL, ids=[f"{r}-{i}" for i, (_, _, r) in enumerate(REAL)]
)
def test_real_messages_land_in_their_class(message, registry, reason):
    assert parse_failed(message) == (registry.replace(":", "_"), reason)


@pytest.mark.unit
@pytest.mark.parametrize(
    "message",
    [
        "Error: ErrImagePull",
        "Error: ImagePullBackOff",
        'Back-off pulling image "nginx"',
        "Error: failed to create containerd task: oci runtime",
    ],
)
def test_other_failed_messages_are_not_pulls(message):
    assert parse_failed(message) is None


@pytest.mark.unit
def test_a_combined_event_is_read_behind_its_prefix():
    message = REAL[0][0]
    assert parse_failed(COMBINED + message) == ("index.docker.io", "rate_limited")
    assert parse_failed(COMBINED + "Error: ErrImagePull") is None
    assert parse_failed(COMBINED + COMBINED + message) is None  # the recorder adds it once
    assert parse_failed("Warning " + COMBINED + message) is None
    pulled = 'Successfully pulled image "ghcr.io/x/app:9" in 2s (2s including waiting)'
    assert registry_of_pulled(COMBINED + pulled) == registry_of_pulled(pulled) == "ghcr.io"
    assert registry_of_pulled(COMBINED + 'Container image "a" already present') is None

    counts = FailureCounts(0, RegistryLabels(10))
    combined = event(COMBINED + message, name="p.1") | {"source": {"host": "node-1"}}
    counts.on_add(combined)
    newest = dict(combined, count=3, message=COMBINED + REAL[-1][0])
    counts.on_update(combined, newest)
    counts.on_update(newest, dict(newest, count=4, message=COMBINED + "Error: ErrImagePull"))
    assert counts.snapshot().failures == {
        ("index.docker.io", "rate_limited"): 1,
        ("127.0.0.1_36793", "tls"): 2,
    }


@pytest.mark.unit
def test_names_in_the_text_do_not_pick_the_class():
    # A registry or repository named after a class word, in a plain connection error.
    message = (
        'Failed to pull image "quota.example/forbidden/not-found:1": rpc error: code = '
        'Unknown desc = failed to resolve reference "quota.example/forbidden/not-found:1":'
        ' failed to do request: Head "https://quota.example/v2/forbidden/not-found/'
        'manifests/1": dial tcp 10.0.0.1:443: connect: connection refused'
    )
    assert parse_failed(message) == ("quota.example", "other")
    assert classify("") == "other"


@pytest.mark.unit
def test_hostile_messages_cannot_grow_the_label_set():
    counts = FailureCounts(0, RegistryLabels(5))
    for i in range(2000):
        host = f"r{i}.example" if i % 2 else f"{'X' * 300}{i}\u202e\n{{}}=evil"
        counts.on_add(
            event(f'Failed to pull image "{host}/a:1": x509: bad {i} "quota"', name=f"e{i}")
            | {"source": {"host": f"node-{i}"}}
        )
        counts.on_add(event(f'Failed to pull image "{i}": {"a" * 10000}', name=f"f{i}"))
    families = failure_families(counts.snapshot())
    failures = families[0].samples
    assert {s.labels["reason"] for s in failures} <= {"tls", "other", "rate_limited"}
    registries = {s.labels["registry"] for f in families for s in f.samples}
    assert len(registries) <= 6 and "other" in registries
    assert all(len(r) <= 100 and r.isprintable() and '"' not in r for r in registries)
    assert sum(s.value for s in failures) == 4000


@pytest.mark.unit
def test_golden_exposition():
    counts = FailureCounts(0, RegistryLabels(3), clock=lambda: 1000.0)
    pulled = PulledEvents(since=0, failures=counts)
    for i, (message, _, _) in enumerate(REAL):
        counts.on_add(event(message, name=f"f{i}") | {"source": {"host": f"node-{i % 4}"}})
    repeated = event(REAL[0][0], name="r") | {"source": {"host": "node-9"}}
    counts.on_add(repeated)
    counts.on_update(repeated, dict(repeated, count=5))
    for image in ("nginx:1.25", "ghcr.io/x/app:1", "ghcr.io/x/app:2", "quay.io/y/z:3"):
        pulled.on_add(event(f'Successfully pulled image "{image}" in 2s (2s including waiting)'))
    assert_golden("imagepull_failures", failure_families(counts.snapshot()))


@pytest.mark.unit
def test_failing_nodes_forget_failures_older_than_the_window():
    now = [0.0]
    counts = FailureCounts(0, RegistryLabels(10), clock=lambda: now[0])
    for node in ("a", "b", "b"):
        counts.on_add(event(REAL[0][0], name=node) | {"source": {"host": node}})
    assert counts.snapshot().failing_nodes == {"index.docker.io": 2}
    now[0] = 601.0
    assert counts.snapshot().failing_nodes == {"index.docker.io": 0}


@pytest.mark.integration
def test_failures_from_failed_events_in_a_real_apiserver(apiserver, namespace, events_collector):
    post_event(apiserver, namespace, "Failed", REAL[0][0])  # before the start: not counted
    time.sleep(1.1)
    c = events_collector("--image-pull.max-registries", "2")
    collect(c)  # both watches synced
    for i, (message, _, _) in enumerate(REAL):
        post_event(apiserver, namespace, "Failed", message, host=f"node-{i % 3}")
    post_event(apiserver, namespace, "Failed", "Error: ErrImagePull")
    post_event(apiserver, namespace, "BackOff", 'Back-off pulling image "nginx"')
    post_event(
        apiserver,
        namespace,
        "Pulled",
        'Successfully pulled image "index.docker.io/a:1" in 1s (1s including waiting)',
    )
    # Failed and Pulled events come through two watches: wait for both to deliver.
    deadline = time.monotonic() + 15
    while True:
        families = collect(c)
        total = sum(
            s.value
            for f in families
            for s in f.samples
            if s.name == "kubescale_image_pull_failures_total"
        )
        succeeded = sum(
            s.value
            for f in families
            for s in f.samples
            if s.name == "kubescale_image_pulls_succeeded_total"
        )
        if total == len(REAL) and succeeded >= 1:
            break
        assert time.monotonic() < deadline, (total, succeeded)
        time.sleep(0.2)
    # First come: the first two registries keep their names, the rest are "other".
    assert (
        sample(
            families,
            "kubescale_image_pull_failures_total",
            registry="index.docker.io",
            reason="rate_limited",
        )
        == 1
    )
    assert (
        sample(
            families,
            "kubescale_image_pull_failures_total",
            registry="docker.io",
            reason="rate_limited",
        )
        == 1
    )
    assert (
        sample(families, "kubescale_image_pull_failures_total", registry="other", reason="timeout")
        == 4
    )
    assert (
        sample(families, "kubescale_image_pulls_succeeded_total", registry="index.docker.io") == 1
    )
    assert sample(families, "kubescale_image_pull_failing_nodes", registry="other") == 3


@pytest.mark.integration
def test_an_event_written_through_events_k8s_io_v1_counts_with_its_node(
    apiserver, namespace, events_collector
):
    """A kubelet on the new events API writes note, reportingController and
    reportingInstance, no deprecatedSource: the core/v1 watch reads it with an empty
    source.host, and the failing node comes from reportingInstance."""
    time.sleep(1.1)  # creationTimestamp has whole seconds: no earlier test's event counts
    c = events_collector()
    collect(c)
    now = time.strftime("%Y-%m-%dT%H:%M:%S.000000Z", time.gmtime())
    apiserver.admin.create(
        f"/apis/events.k8s.io/v1/namespaces/{namespace}/events",
        {
            "metadata": {"name": "new-api-failed"},
            "eventTime": now,
            "reportingController": "kubelet",
            "reportingInstance": "node-new-api",
            "action": "Pulling",
            "reason": "Failed",
            "type": "Warning",
            "note": REAL[0][0],
            "regarding": {"kind": "Pod", "name": "p", "namespace": namespace},
        },
    )
    registry, reason = REAL[0][1], REAL[0][2]

    def failures():
        try:
            families = collect(c)
            return sample(
                families, "kubescale_image_pull_failures_total", registry=registry, reason=reason
            ), sample(families, "kubescale_image_pull_failing_nodes", registry=registry)
        except KeyError:  # not delivered yet: the registry has no series
            return None

    deadline = time.monotonic() + 15
    while failures() is None:
        assert time.monotonic() < deadline
        time.sleep(0.2)
    assert failures() == (1, 1)


@pytest.mark.integration
def test_combined_events_count_as_the_recorder_writes_them(apiserver, namespace, events_collector):
    """client-go's recorder, past 9 distinct messages of one reason about one pod within 10
    minutes: it creates an event of count 1 whose message is the prefix and the newest
    message, then patches count, lastTimestamp and message on each later one (by more than
    one when it held some back). Counted: each rise, with the newest message."""
    time.sleep(1.1)  # creationTimestamp has whole seconds: no earlier test's event counts
    c = events_collector()
    collect(c)  # both watches synced
    pulled = post_event(
        apiserver,
        namespace,
        "Pulled",
        COMBINED + 'Successfully pulled image "a:9" in 4s (6s including waiting)',
    )
    failed = post_event(apiserver, namespace, "Failed", COMBINED + REAL[0][0])
    for name, count, message in (
        (pulled, 2, 'Successfully pulled image "a:10" in 10s (10s including waiting)'),
        (failed, 3, REAL[-1][0]),
        (pulled, 4, 'Successfully pulled image "ghcr.io/b:1" in 30s (31s including waiting)'),
        (pulled, 5, 'Container image "a:9" already present on machine'),
        (failed, 4, "Error: ErrImagePull"),
    ):
        recorder_patch(apiserver, namespace, name, count, COMBINED + message)
    # Plain events after the patches: once they are counted, so is every patch before them.
    post_event(apiserver, namespace, "Pulled", 'Successfully pulled image "z" in 1s')
    post_event(apiserver, namespace, "Failed", REAL[8][0])

    def counted():
        families = collect(c)
        failures = {
            (s.labels["registry"], s.labels["reason"]): s.value
            for f in families
            for s in f.samples
            if s.name == "kubescale_image_pull_failures_total"
        }
        return families, failures

    deadline = time.monotonic() + 15
    while True:
        families, failures = counted()
        pulls = sample(families, "kubescale_image_pull_duration_seconds_count")
        if pulls == 5 and ("private_registery.mydomain", "timeout") in failures:
            break
        assert time.monotonic() < deadline, (pulls, failures)
        time.sleep(0.2)
    assert failures == {
        ("index.docker.io", "rate_limited"): 1,
        ("127.0.0.1_36793", "tls"): 2,
        ("private_registery.mydomain", "timeout"): 1,
    }
    assert sample(families, "kubescale_image_pull_duration_seconds_sum") == 4 + 10 + 2 * 30 + 1
    assert sample(families, "kubescale_image_pull_queue_wait_seconds_count") == 4
    assert sample(families, "kubescale_image_pull_queue_wait_seconds_sum") == 2 + 0 + 2 * 1
    succeeded = {
        s.labels["registry"]: s.value
        for f in families
        for s in f.samples
        if s.name == "kubescale_image_pulls_succeeded_total"
    }
    assert succeeded == {"docker.io": 3, "ghcr.io": 2}
