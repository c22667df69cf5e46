"""The production cases each alert is tested against, too long to write by hand as promtool
input: the stories are told with tests/mixin/story.py and written to a file at test time.

CASES maps a file name to (build, config): `build(rules)` returns the promtool test given
the rendered rules (for the alerts' static summaries), `config` is the mixin config the
case needs rendered (None: the committed rules/).
"""

from __future__ import annotations

from tests.mixin.story import (
    CLUSTER_JOB,
    NODE_JOB,
    Target,
    counter,
    every,
    firing,
    test_file,
)

GIB = 1024**3


def _series(*targets: Target) -> list[dict]:
    return [s for t in targets for s in t.input_series()]


def _expect(alert: str, at: int, alerts: list[dict]) -> dict:
    return {"alertname": alert, "eval_time": f"{at}m", "exp_alerts": alerts}


def _fires(rules: dict, alert: str, at: int, labels: dict, description: str) -> dict:
    """`alert` firing at minute `at`, once, with these labels and this description."""
    return _expect(alert, at, [firing(rules, alert, labels, description)])


def _prometheus(minutes: int, head_series: int, memory_share: float) -> list[Target]:
    """Cluster prod's Prometheus, its self-scrape timing out every 7th minute, and cAdvisor's
    view of its container (a 32 GiB limit), timing out every 3rd: kubelets at scale are slow."""
    prod = {"cluster": "prod"}
    prometheus = Target("prometheus-k8s", "10.0.3.1:9090", prod, minutes, every(7, 3, minutes))
    prometheus.add("prometheus_tsdb_head_series", head_series)
    prometheus.add("process_start_time_seconds", -86400)
    prometheus.add("prometheus_tsdb_data_replay_duration_seconds", 40)
    prometheus.add(
        "prometheus_http_requests_total", counter(600), handler="/api/v1/query_range", code="200"
    )
    cadvisor = Target("kubelet", "node-m", prod, minutes, every(3, 1, minutes))
    container = {
        "namespace": "monitoring",
        "pod": "prometheus-k8s-0",
        "container": "prometheus",
        "id": "/kubepods/pod1/c1",
    }
    cadvisor.add("container_memory_working_set_bytes", int(memory_share * 32 * GIB), **container)
    cadvisor.add("container_spec_memory_limit_bytes", 32 * GIB, **container)
    return [prometheus, cadvisor]


def gaps(rules: dict) -> dict:
    """Every alert that holds a gauge through its `for`, on targets whose scrapes time out
    every few minutes and whose exporters restart: none of it resets the `for`. Cluster
    "prod":
      node-a (times out every 4th minute, its pod restarts at 40): its ipv4 neighbor table
        90% full; 4 images queued behind a serialized download that stalled at minute 10,
        the oldest pull older than 20 minutes; 2 preload images missing; 75 samples a
        scrape, over its budget of 60.
      node-b (every 5th minute): ipv6 thresholds at the kernel default, 58% used.
      cp-0, cp-1 (etcd-node-full pods, each every 4th minute): the pod beside etcd's leader
        counts keys, events 40% of them; the leader moves at minute 35 and cp-1's pod counts
        from minute 39.
      the cluster-mode exporter (every 6th minute, OOMKilled at 30: two scrapes lost): its
        priorityclasses watch down from minute 5, a balloon Pending since before the start,
        3 balloons misconfigured.
      Prometheus (its self-scrape every 7th minute; cAdvisor's every 3rd): 1.7M head series
        of a 2M budget, its container at 85% of its memory limit.
    """
    minutes = 90
    prod = {"cluster": "prod"}
    restarted = every(4, 3, minutes) | {40, 41}
    node_a = Target(NODE_JOB, "10.0.1.1:9867", {"node": "node-a", **prod}, minutes, restarted, 75)
    node_a.add("kubescale_neighbor_gc_thresh3", 4096, family="ipv4")
    node_a.add("kubescale_neighbor_entries", 3800, family="ipv4")
    node_a.add("kubescale_neighbor_gc_eligible_entries", 3700, family="ipv4")
    node_a.add("kubescale_image_pulls_queued", 4)
    node_a.add("kubescale_image_pulls_in_progress", 1)
    node_a.add("kubescale_image_pull_stalled", lambda m: 1 if m >= 10 else 0)
    node_a.add("kubescale_image_pull_oldest_seconds", lambda m: 1300 + 60 * m)
    node_a.add("kubescale_kubelet_serialize_image_pulls", 1)
    node_a.add("kubescale_image_preload_missing", 2)

    node_b = Target(
        NODE_JOB,
        "10.0.1.2:9867",
        {"node": "node-b", **prod},
        minutes,
        every(5, 2, minutes),
        samples=35,
    )
    node_b.add("kubescale_neighbor_gc_thresh3", 1024, family="ipv6")
    node_b.add("kubescale_neighbor_entries", 640, family="ipv6")
    node_b.add("kubescale_neighbor_gc_eligible_entries", 600, family="ipv6")

    keys = {"events": 40000, "pods": 50000, "leases": 10000}
    etcd_nodes = []
    for i, (leads, lost_offset) in enumerate([(lambda m: m < 35, 1), (lambda m: m >= 39, 2)]):
        pod = Target(
            NODE_JOB,
            f"10.0.0.1{i}:9867",
            {"node": f"cp-{i}", **prod},
            minutes,
            every(4, lost_offset, minutes),
            samples=150,
        )
        pod.add("kubescale_etcd_up", 1, etcd_cluster="main")
        for resource, n in keys.items():
            pod.add(
                "kubescale_etcd_keys",
                lambda m, leads=leads, n=n: n if leads(m) else None,
                etcd_cluster="main",
                resource=resource,
            )
        etcd_nodes.append(pod)

    oomkilled = every(6, 4, minutes) | {30, 31}
    cluster = Target(
        CLUSTER_JOB, "10.0.2.1:9867", {"node": "infra-7", **prod}, minutes, oomkilled, 300
    )
    cluster.add("kubescale_kube_watch_up", 1, resource="pods")
    cluster.add("kubescale_kube_watch_up", lambda m: 0 if m >= 5 else 1, resource="priorityclasses")
    cluster.add("kubescale_balloon_pods", 5, phase="Running")
    cluster.add("kubescale_balloon_pods", 2, phase="Pending")
    cluster.add("kubescale_balloon_pending_oldest_seconds", lambda m: 1000 + 60 * m)
    cluster.add("kubescale_balloon_misconfigured", 3, reason="priority_not_negative")

    prometheus, cadvisor = _prometheus(minutes, 1700000, 0.85)

    on_a = {"job": NODE_JOB, "instance": "10.0.1.1:9867", "node": "node-a"}
    warning, info = {"severity": "warning"}, {"severity": "info"}
    # (alert, quiet before, firing at, labels, description: text, or text by the minute)
    expected = [
        (
            "KubeScaleNeighborTableNearFull",
            9,
            (20, 45, 80),
            {**on_a, "family": "ipv4", **warning},
            "The ipv4 neighbor table on node node-a uses 90.33% of gc_thresh3.",
        ),
        (
            "KubeScaleImagePullBacklog",
            None,
            (20, 45),
            {**on_a, **warning},
            "4 images needed by waiting containers on node node-a are neither present nor downloading, while other downloads hold the pull slots.",
        ),
        (
            "KubeScaleImagePullStalled",
            None,
            (20, 45),
            {**on_a, **warning},
            "Image downloads without progress on node node-a: 1. containerd cancels them and the kubelet starts over.",
        ),
        (
            "KubeScaleImagePullTakingTooLong",
            None,
            (20, 45),
            {**on_a, **warning},
            {
                20: "The oldest unfinished image pull on node node-a started 41m 40s ago.",
                45: "The oldest unfinished image pull on node node-a started 1h 6m 40s ago.",
            },
        ),
        (
            "KubeScaleImagePullsSerializedWithBacklog",
            14,
            (45,),
            {**on_a, **warning},
            "Node node-a runs the kubelet with serializeImagePulls=true while a download holds the only pull slot and 4 images wait for it.",
        ),
        (
            "KubeScaleImagePreloadMissing",
            58,
            (80,),
            {**on_a, **info},
            "Node node-a is missing 2 of its preloaded images.",
        ),
        (
            "KubeScaleNeighborThresholdsAtKernelDefault",
            58,
            (80,),
            {"family": "ipv6", **warning},
            "1 nodes have ipv6 gc_thresh3 at the kernel default (1024) and use more than 50% of it, e.g. node-b.",
        ),
        (
            "KubeScaleExporterSeriesOverBudget",
            28,
            (45,),
            {"job": NODE_JOB, **warning},
            "The largest kube-scale-exporter-node target over its budget exposes 75 samples per scrape; over budget: node-a.",
        ),
        (
            "KubeScaleEtcdEventsInMainEtcd",
            58,
            (80,),
            {"etcd_cluster": "main", **warning},
            "Events are 40% of the keys in etcd cluster main; move them to their own etcd with --etcd-servers-overrides.",
        ),
        (
            "KubeScaleBalloonMisconfigured",
            None,
            (25, 45),
            {"reason": "priority_not_negative", **warning},
            "3 balloons are misconfigured: priority_not_negative.",
        ),
        (
            "KubeScaleKubeWatchDown",
            19,
            (25, 45),
            {"job": CLUSTER_JOB, "resource": "priorityclasses", **warning},
            "The priorityclasses watch is down on 1 kube-scale-exporter-cluster targets.",
        ),
        (
            "KubeScaleBalloonPendingTooLong",
            None,
            (20, 35),
            warning,
            {
                20: "The oldest Pending balloon has waited 36m 40s.",
                35: "The oldest Pending balloon has waited 51m 40s.",
            },
        ),
        (
            "KubeScalePrometheusHeadSeriesNearBudget",
            None,
            (26, 50),
            {"job": "prometheus-k8s", "instance": "10.0.3.1:9090", **warning},
            "Prometheus 10.0.3.1:9090 holds 1.7M head series, against a budget of 2000000: above 80% of it, or on course to exceed it within 6 hours at the growth of its peaks over the last 6h.",
        ),
        (
            "KubeScalePrometheusMemoryNearLimit",
            None,
            (26, 50),
            {"namespace": "monitoring", "pod": "prometheus-k8s-0", **warning},
            "Prometheus pod monitoring/prometheus-k8s-0 uses 85% of its memory limit.",
        ),
    ]
    checks = []
    for name, quiet, times, labels, description in expected:
        if quiet is not None:
            checks.append(_expect(name, quiet, []))
        for at in times:
            text = description[at] if isinstance(description, dict) else description
            checks.append(_fires(rules, name, at, {**labels, **prod}, text))
    return test_file(
        [
            {
                "interval": "1m",
                "input_series": _series(node_a, node_b, *etcd_nodes, cluster, prometheus, cadvisor),
                "alert_rule_test": checks,
            }
        ],
        [g["name"] for g in rules["groups"] if g["name"].endswith(".rules")]
        + [g["name"] for g in rules["groups"] if not g["name"].endswith(".rules")],
        extra=("prometheus_selfprotection_alerts.yaml",),
    )


def registry_restarts(rules: dict) -> dict:
    """docker.io rate-limits every node behind the cluster's NAT address: 3 pulls in 10
    answer 429, from 40 nodes. The cluster-mode exporter's scrapes time out every 7th minute,
    and at minute 30 it is OOMKilled: two scrapes lost, then its counters start again from
    zero and it counts the failing nodes again, 5 more each minute, from zero. Once with the
    same instance label (the container restarted in its pod), once with a new one (the pod
    rescheduled on another node, its series new). ghcr.io fails every pull of one node and
    mirror.corp refuses 5% of pulls: both stay silent, restarts or not. A lost scrape or our
    exporter's restart is not the registry recovering: the alert fires through it."""
    minutes = 60
    prod = {"cluster": "prod"}
    timeouts = every(7, 5, minutes)

    def exporter(instance, node, start=0, end=None, restart=None, lost=()):
        """The exporter's target; its process (re)started at minute `restart`, counting
        every counter and the failing nodes again from zero then."""
        t = Target(
            CLUSTER_JOB,
            instance,
            {"node": node, **prod},
            minutes,
            timeouts | set(lost),
            start=start,
            end=end,
            samples=300,
        )
        resets = [] if restart is None else [restart]

        def nodes(n):
            return lambda m: n if restart is None or m < restart else min(n, 5 * (m - restart))

        # (registry, cause of its failures, failures and successes a minute, failing nodes)
        for registry, reason, failed, succeeded, failing in (
            ("docker.io", "rate_limited", 3, 7, 40),
            ("ghcr.io", "timeout", 5, None, 1),
            ("mirror.corp", "timeout", 1, 19, 30),
        ):
            labels = {"registry": registry}
            t.add(
                "kubescale_image_pull_failures_total",
                counter(failed, resets),
                reason=reason,
                **labels,
            )
            if succeeded is not None:
                t.add("kubescale_image_pulls_succeeded_total", counter(succeeded, resets), **labels)
            t.add("kubescale_image_pull_failing_nodes", nodes(failing), **labels)
        return t

    tests = []
    for targets in (
        # OOMKilled: the same target, two scrapes lost, counters from zero at 32.
        [exporter("10.0.2.1:9867", "infra-7", restart=32, lost={30, 31})],
        # Rescheduled: the old target gone at 30, a new one from 32.
        [
            exporter("10.0.2.1:9867", "infra-7", end=30),
            exporter("10.0.2.9:9867", "infra-3", start=32, restart=32),
        ],
    ):
        checks = [_expect("KubeScaleImageRegistryRateLimited", 8, [])]
        for at in (25, 31, 33, 36, 40, 45, 55):
            checks.append(
                _expect(
                    "KubeScaleImageRegistryRateLimited",
                    at,
                    [
                        firing(
                            rules,
                            "KubeScaleImageRegistryRateLimited",
                            {"registry": "docker.io", "severity": "warning", **prod},
                            "Registry docker.io refused 30% of image pulls with a rate limit or quota over the last 10m, on 5 or more nodes.",
                        )
                    ],
                )
            )
        checks += [_expect("KubeScaleImageRegistryPullsFailing", at, []) for at in (25, 36, 55)]
        tests.append(
            {"interval": "1m", "input_series": _series(*targets), "alert_rule_test": checks}
        )
    return test_file(tests, [g["name"] for g in rules["groups"]])


# Per-minute counts of the re-exported histograms' buckets (le: 2, 8, 16, 32, 256 ms, +Inf).
LE = ("0.002", "0.008", "0.016", "0.032", "0.256", "+Inf")
FSYNC = {"fast": (5820, 5988, 6000, 6000, 6000, 6000), "slow": (5000, 5700, 5800, 6000, 6000, 6000)}
COMMIT = {
    "fast": (2400, 3000, 3000, 3000, 3000, 3000),
    "slow": (1000, 2500, 2800, 2900, 3000, 3000),
}


def etcd_member(
    t: Target,
    etcd_cluster,
    member,
    size,
    quota=8 * GIB,
    leader=False,
    fsync="fast",
    commit="fast",
    sent=30e6,
    alarms=False,
):
    """One member as the etcd collector exposes it; the counters are etcd's own, so they keep
    counting whichever exporter reads them."""
    labels = {"etcd_cluster": etcd_cluster, "member": member}
    t.add("kubescale_etcd_db_size_bytes", size, **labels)
    t.add("kubescale_etcd_db_size_in_use_bytes", int(size * 0.9), **labels)
    t.add("kubescale_etcd_quota_bytes", quota, **labels)
    t.add("kubescale_etcd_is_leader", int(leader), **labels)
    if alarms:
        for alarm in ("NOSPACE", "CORRUPT"):
            t.add("kubescale_etcd_alarm_active", 0, alarm=alarm, **labels)
    for histogram, counts in (("wal_fsync", FSYNC[fsync]), ("backend_commit", COMMIT[commit])):
        for le, n in zip(LE, counts, strict=True):
            t.add(
                f"kubescale_etcd_{histogram}_duration_seconds_bucket",
                counter(n, start=1000 * n),
                le=le,
                **labels,
            )
    t.add("kubescale_etcd_client_sent_bytes_total", counter(sent * 60, start=5e12), **labels)
    t.add("kubescale_etcd_range_requests_total", counter(6000, start=1e7), **labels)
    t.add("kubescale_etcd_writes_refused_total", 0, **labels)


def clusters(rules: dict) -> dict:
    """Three clusters in one store (Thanos, Mimir, a central VictoriaMetrics), with the same
    job names, node names (n1, cp-0..cp-2, infra-7) and etcd member names (e0, e1; cp-0..cp-2
    in two of them):
      prod: key-less etcd-node pods on cp-0..cp-2 (members by hex id); cp-1's WAL fsync is
        slow. Its cluster-mode exporter watches the events etcd, whose e1 sends 150 MB/s; the
        exporter's pod is rescheduled at minute 20 (a new instance label from 22).
      staging: etcd-node-full pods on cp-0..cp-2 (members by name) and its cluster-mode
        exporter both watch main, at 85% of its quota; cp-2's backend commits are slow. Its
        events etcd, members e0 and e1 as in prod, is quiet.
      dev: its whole install is pruned at minute 10 (GitOps, the namespace deleted).
    Each alert names its cluster, each per-member alert its machine, and the two placements
    of staging's members are one series each."""
    minutes = 60
    hex_ids = ("8e9e05c52164694d", "91bc3c398fb3c146", "fd422379fda50e48")
    targets = []

    def staging_main(t: Target, i: int) -> None:
        """staging's main member cp-i, as its etcd-node-full pod and its exporter read it."""
        size = int(0.85 * 8 * GIB) - i * GIB // 10
        commit = "slow" if i == 2 else "fast"
        etcd_member(t, "main", f"cp-{i}", size, leader=i == 0, commit=commit, alarms=True)

    def events(t: Target, e1_sent: float) -> None:
        t.add("kubescale_etcd_up", 1, etcd_cluster="events")
        etcd_member(t, "events", "e0", GIB, leader=True, sent=10e6, alarms=True)
        etcd_member(t, "events", "e1", GIB, sent=e1_sent, alarms=True)

    for cluster, prefix in (("prod", "10.0"), ("staging", "10.8")):
        node = Target(
            NODE_JOB, f"{prefix}.1.1:9867", {"node": "n1", "cluster": cluster}, minutes, samples=35
        )
        node.add("kubescale_neighbor_gc_thresh3", 131072, family="ipv4")
        targets.append(node)
        for i in range(3):
            pod = Target(
                NODE_JOB,
                f"{prefix}.0.1{i}:9867",
                {"node": f"cp-{i}", "cluster": cluster},
                minutes,
                samples=70,
            )
            pod.add("kubescale_etcd_up", 1, etcd_cluster="main")
            if cluster == "prod":
                etcd_member(
                    pod,
                    "main",
                    hex_ids[i],
                    2 * GIB,
                    leader=i == 0,
                    fsync="slow" if i == 1 else "fast",
                )
            else:
                staging_main(pod, i)
            targets.append(pod)

    def exporter(cluster, instance, node, **lifetime) -> Target:
        """A cluster's cluster-mode exporter, alive from `start` until `end`."""
        labels = {"node": node, "cluster": cluster}
        return Target(CLUSTER_JOB, instance, labels, minutes, samples=300, **lifetime)

    # prod's exporter rescheduled: gone at 20, its successor (a new instance) from 22.
    prod_exporters = [
        exporter("prod", "10.0.2.1:9867", "infra-7", end=20),
        exporter("prod", "10.0.2.9:9867", "infra-3", start=22),
    ]
    for t in prod_exporters:
        events(t, 150e6)
    staging = exporter("staging", "10.8.2.1:9867", "infra-7")
    staging.add("kubescale_etcd_up", 1, etcd_cluster="main")
    for i in range(3):
        staging_main(staging, i)
    events(staging, 10e6)
    dev_node = {"node": "n1", "cluster": "dev"}
    dev = [
        Target(NODE_JOB, "10.9.1.1:9867", dev_node, minutes, samples=35, end=10),
        exporter("dev", "10.9.2.1:9867", "infra-7", end=10),
    ]
    dev[1].add("kubescale_etcd_up", 1, etcd_cluster="main")
    etcd_member(dev[1], "main", "m0", GIB, leader=True, alarms=True)
    targets += prod_exporters + [staging] + dev

    warning = {"severity": "warning"}
    main = {"etcd_cluster": "main", **warning}
    expected = [
        (
            "KubeScaleExporterTargetMissing",
            30,
            {"cluster": "dev", **warning},
            "Cluster dev reported kube-scale-exporter targets in the last 24h and has none now: its install was removed (pruned, its namespace deleted) or its scrape configuration lost.",
        ),
        (
            "KubeScaleEtcdNotObserved",
            30,
            {"cluster": "dev", **main},
            "etcd cluster main was reported in the last 24h but no target reaches it now (the targets are down or etcd does not answer them): its quota and alarm alerts cannot fire.",
        ),
        (
            "KubeScaleEtcdWalFsyncSlow",
            25,
            {"cluster": "prod", "member": hex_ids[1], "node": "cp-1", **main},
            f"On node cp-1 (member {hex_ids[1]}) of etcd cluster main, the WAL fsync takes 27.2ms (p99 over 5m); every write waits for it, and slow fsyncs cost leader elections.",
        ),
        (
            "KubeScaleEtcdBackendCommitSlow",
            25,
            {"cluster": "staging", "member": "cp-2", "node": "cp-2", **main},
            "On node cp-2 of etcd cluster main, the backend commit to disk takes 188.8ms (p99 over 5m).",
        ),
        (
            "KubeScaleEtcdDatabaseNearQuota",
            30,
            {"cluster": "staging", **main},
            "etcd cluster main uses 85% of its backend quota on its fullest member, on node cp-0.",
        ),
    ] + [
        (
            "KubeScaleEtcdReadBandwidthHigh",
            at,
            {"cluster": "prod", "etcd_cluster": "events", "member": "e1", "node": "e1", **warning},
            "On node e1 of etcd cluster events, etcd sends 150MB/s to its clients, over 100 MB/s for 15m. Usually full LISTs without resourceVersion or informers relisting: find the client in apiserver_request_total by verb and resource, or in the audit log.",
        )
        for at in (30, 40)
    ]
    checks = [
        _expect("KubeScaleExporterTargetMissing", 20, []),
        _expect("KubeScaleEtcdAlarmActive", 30, []),
    ] + [_fires(rules, *case) for case in expected]
    record = "etcd_cluster_member:kubescale_etcd_db_size_bytes:max"
    sizes = {
        "test": [
            {
                "expr": record + '{cluster="staging", etcd_cluster="main"}',
                "eval_time": "30m",
                "exp_samples": [
                    {
                        "labels": record
                        + '{cluster="staging", etcd_cluster="main", member="cp-%d", node="cp-%d"}'
                        % (i, i),
                        "value": int(0.85 * 8 * GIB) - i * GIB // 10,
                    }
                    for i in range(3)
                ],
            },
            {
                "expr": record + '{cluster="prod", etcd_cluster="main"}',
                "eval_time": "30m",
                "exp_samples": [
                    {
                        "labels": record
                        + '{cluster="prod", etcd_cluster="main", member="%s", node="cp-%d"}'
                        % (h, i),
                        "value": 2 * GIB,
                    }
                    for i, h in enumerate(hex_ids)
                ],
            },
        ]
    }
    return test_file(
        [
            {
                "interval": "1m",
                "input_series": _series(*targets),
                "promql_expr_test": sizes["test"],
                "alert_rule_test": checks,
            }
        ],
        [g["name"] for g in rules["groups"] if g["name"].endswith(".rules")]
        + [g["name"] for g in rules["groups"] if not g["name"].endswith(".rules")],
    )


TUNED = {"max_concurrent_downloads": 10, "image_pull_progress_timeout_seconds": 1800}
UNTUNED = {"max_concurrent_downloads": 3, "image_pull_progress_timeout_seconds": 300}


def _containerd(t: Target, settings) -> Target:
    for setting in TUNED:
        t.add(
            f"kubescale_containerd_{setting}",
            settings(setting) if callable(settings) else settings[setting],
        )
    return t


def _pool_node(i: int, prefix: str, minutes: int, **labels) -> Target:
    """Node i of a pool: it loses a scrape every 6 minutes, nodes at different offsets."""
    return Target(
        NODE_JOB,
        f"10.{64 + i // 62500}.{i // 250 % 250}.{i % 250 + 1}:9867",
        {"node": f"{prefix}-{i:05d}", "cluster": "prod", **labels},
        minutes,
        every(6, i % 6, minutes),
    )


def _settings_test(rules, targets, quiet, at, labels, describe) -> dict:
    """KubeScaleContainerdPullSettingsDiffer quiet at minute `quiet` and, at `at`, one alert
    per setting with `labels`, described by `describe(setting)`."""
    alerts = [
        firing(
            rules,
            "KubeScaleContainerdPullSettingsDiffer",
            {**labels, "setting": setting, "severity": "info"},
            describe(setting),
        )
        for setting in sorted(TUNED)
    ]
    checks = [
        _expect("KubeScaleContainerdPullSettingsDiffer", quiet, []),
        _expect("KubeScaleContainerdPullSettingsDiffer", at, alerts),
    ]
    return test_file(
        [{"interval": "1m", "input_series": _series(*targets), "alert_rule_test": checks}],
        ["kube-scale-exporter-imagepull.rules", "kube-scale-exporter-containerd-settings"],
    )


def node_image_rollout(rules: dict) -> dict:
    """A 2,500-node pool rolls a new node image, 10 nodes a minute from minute 5, and the new
    image lost containerd's pull tuning. Each node loses a scrape every 6 minutes, so a node
    replaced at the minute its scrape is lost is counted a scrape later: at 75 minutes 709
    nodes are seen on containerd's defaults. One alert per setting for the cluster, counting
    them and naming the first three, where one alert per node gave hundreds."""
    minutes, nodes, at = 80, 2500, 75
    targets = [
        _containerd(
            _pool_node(i, "pool-a", minutes),
            lambda setting, i=i: lambda m: (UNTUNED if m >= 5 + i // 10 else TUNED)[setting],
        )
        for i in range(nodes)
    ]
    # A node is seen on the new image once a scrape after its replacement succeeded.
    seen = [
        t.labels["node"] for i, t in enumerate(targets) if set(range(5 + i // 10, at + 1)) - t.lost
    ]

    return _settings_test(
        rules,
        targets,
        60,
        at,
        {"cluster": "prod"},
        lambda setting: (
            f"{len(seen)} nodes of cluster prod run containerd {setting} unlike the majority, "
            f"which runs {TUNED[setting]}: "
            + ", ".join(f"{node} ({UNTUNED[setting]})" for node in sorted(seen)[:3])
            + ". Their node image may have lost the tuning."
        ),
    )


def node_pools(rules: dict) -> dict:
    """With nodePoolLabel set ("pool"): cluster prod's gpu pool (40 nodes) runs the tuned
    image but for gpu-00007, its cpu pool (60 nodes) containerd's defaults on purpose. Each
    pool is judged by its own majority: one alert for gpu-00007's pool; none for the cpu pool,
    which a cluster-wide majority would make the right one and the gpu pool wrong."""
    minutes = 80
    targets = [
        _containerd(_pool_node(i, "gpu", minutes, pool="gpu"), UNTUNED if i == 7 else TUNED)
        for i in range(40)
    ]
    targets += [
        _containerd(_pool_node(100 + i, "cpu", minutes, pool="cpu"), UNTUNED) for i in range(60)
    ]

    return _settings_test(
        rules,
        targets,
        50,
        75,
        {"cluster": "prod", "pool": "gpu"},
        lambda setting: (
            f"1 nodes of cluster prod node pool gpu run containerd {setting} unlike the majority, "
            f"which runs {TUNED[setting]}: gpu-00007 ({UNTUNED[setting]}). Their node image may "
            "have lost the tuning."
        ),
    )


def noisy(rules: dict) -> dict:
    """A healthy cluster "prod" of 150 nodes as it is day to day: the busy tenth of its nodes
    time out a scrape every 4 minutes, the cluster-mode exporter every 6th minute, Prometheus'
    self-scrape every 7th and cAdvisor's every 3rd; the DaemonSet rolls, 15 pods a minute,
    each pod's restart losing a scrape and its pods watch down at its first scrape; the
    cluster-mode exporter is OOMKilled at minute 40 (two scrapes lost, counters from zero,
    the failing nodes counted again, its watches down at its first scrape) and rescheduled at
    60 (a new instance label from 62). Nothing is wrong: no alert fires or is pending at any
    of the times checked."""
    minutes, nodes = 90, 150
    prod = {"cluster": "prod"}
    targets = []
    for i in range(nodes):
        restart = 30 + i // 15
        busy = every(4, i % 4, minutes) if i % 10 == 0 else set()
        t = Target(
            NODE_JOB,
            f"10.0.{1 + i // 250}.{i % 250 + 1}:9867",
            {"node": f"node-{i:03d}", **prod},
            minutes,
            busy | {restart},
            samples=40,
        )
        for family, entries in (("ipv4", 3000), ("ipv6", 40)):
            t.add("kubescale_neighbor_gc_thresh3", 131072, family=family)
            t.add("kubescale_neighbor_entries", entries + 200, family=family)
            t.add("kubescale_neighbor_gc_eligible_entries", entries, family=family)
            t.add("kubescale_neighbor_table_overflows_total", 0, family=family)
            t.add(
                "kubescale_neighbor_forced_gc_runs_total", counter(2, [restart + 1]), family=family
            )
        for name, value in (
            ("kubescale_image_pulls_queued", 1),
            ("kubescale_image_pulls_in_progress", 2),
            ("kubescale_image_pull_stalled", 0),
            ("kubescale_image_pull_oldest_seconds", 90),
            ("kubescale_kubelet_serialize_image_pulls", 0),
            ("kubescale_image_preload_missing", 0),
            ("kubescale_image_pull_downloaded_bytes", 10**9),
            ("kubescale_image_pull_expected_bytes", 2 * 10**9),
        ):
            t.add(name, value)
        _containerd(t, TUNED)
        for collector in ("neighbor", "neighbor_gc", "imagepull"):
            t.add("kubescale_scrape_collector_success", 1, collector=collector)
        t.add(
            "kubescale_kube_watch_up", lambda m, r=restart: 0 if m == r + 1 else 1, resource="pods"
        )
        t.add("kubescale_build_info", 1, version="0.2.0", python_version="3.11.7")
        targets.append(t)

    def exporter(instance, node, start=0, end=None, restarts=(), lost=()):
        t = Target(
            CLUSTER_JOB,
            instance,
            {"node": node, **prod},
            minutes,
            every(6, 4, minutes) | set(lost),
            start=start,
            end=end,
            samples=300,
        )
        began = [start, *restarts]
        t.add("kubescale_balloon_pods", 5, phase="Running")
        t.add("kubescale_balloon_pods", 0, phase="Pending")
        t.add("kubescale_balloon_pending_oldest_seconds", 0)
        t.add("kubescale_balloon_nodes", 5)
        t.add("kubescale_balloon_misconfigured", 0, reason="priority_not_negative")
        t.add("kubescale_balloon_preemptions_total", counter(0.2, began))
        for resource in ("pods", "priorityclasses", "events"):
            t.add("kubescale_kube_watch_up", lambda m: 0 if m in began else 1, resource=resource)
        t.add(
            "kubescale_image_pull_failures_total",
            counter(1, began),
            registry="docker.io",
            reason="not_found",
        )
        t.add("kubescale_image_pulls_succeeded_total", counter(49, began), registry="docker.io")
        t.add(
            "kubescale_image_pull_failing_nodes",
            lambda m: min(2, m - max(b for b in began if b <= m)),
            registry="docker.io",
        )
        t.add("kubescale_etcd_up", 1, etcd_cluster="main")
        for k in range(3):
            etcd_member(t, "main", f"m{k}", 2 * GIB, leader=k == 0, alarms=True)
        for resource, n in (("pods", 50000), ("events", 5000), ("leases", 8000)):
            t.add("kubescale_etcd_keys", n, etcd_cluster="main", resource=resource)
        for collector in ("etcd", "balloon", "kube", "imagepull_events"):
            t.add("kubescale_scrape_collector_success", 1, collector=collector)
        t.add("kubescale_build_info", 1, version="0.2.0", python_version="3.11.7")
        return t

    targets += [
        exporter("10.0.2.1:9867", "infra-7", end=60, restarts=[42], lost={40, 41}),
        exporter("10.0.2.9:9867", "infra-3", start=62),
    ]
    targets += _prometheus(minutes, 900000, 0.5)
    alerts = sorted({r["alert"] for g in rules["groups"] for r in g["rules"] if "alert" in r})
    return test_file(
        [
            {
                "interval": "1m",
                "input_series": _series(*targets),
                "alert_rule_test": [
                    _expect(name, at, []) for at in (20, 35, 45, 65, 88) for name in alerts
                ],
            }
        ],
        [g["name"] for g in rules["groups"] if g["name"].endswith(".rules")]
        + [g["name"] for g in rules["groups"] if not g["name"].endswith(".rules")],
        extra=("prometheus_selfprotection_alerts.yaml",),
    )


CASES = {
    "gaps_test.yaml": (gaps, None),
    "registry_restarts_test.yaml": (registry_restarts, None),
    "clusters_test.yaml": (clusters, None),
    "node_image_rollout_test.yaml": (node_image_rollout, None),
    "node_pools_test.yaml": (node_pools, {"nodePoolLabel": "pool"}),
    "noisy_test.yaml": (noisy, None),
}
