"""The balloon collector against a real API server, as the least-privileged user its
documented RBAC allows: PriorityClasses, balloon pods placed with spec.nodeName, /status
patches in the kubelet's place, deletions as preemptions; then the whole exporter."""

import subprocess
import sys
import time

import pytest
import requests

from kube_scale_exporter.cli import make_scraper, parse
from kube_scale_exporter.collectors.balloon import BalloonCollector
from kube_scale_exporter.collectors.imagepull_events import ImagePullEventsCollector
from kube_scale_exporter.kube import informer as informer_module
from testbed.exporter import REPO, start_exporter
from testbed.kube_apiserver import LIMITED_USER, pod_manifest
from testbed.metrics import parse_exposition, sample, wait_until

pytestmark = pytest.mark.integration

NODE_SIZE = {"cpu": "4", "memory": "16Gi", "nvidia.com/gpu": "8", "pods": "110"}


def grant_balloon_rbac(api):
    """Bind the collector's documented rules, and nothing else, to the limited user."""
    rbac = "/apis/rbac.authorization.k8s.io/v1"
    api.admin.request(
        "POST",
        f"{rbac}/clusterroles",
        {
            "metadata": {"name": "kubescale-balloon"},
            "rules": list(BalloonCollector.needs_in("cluster").rbac_rules),
        },
        ok=(201, 409),
    )
    api.admin.request(
        "POST",
        f"{rbac}/clusterrolebindings",
        {
            "metadata": {"name": "kubescale-balloon"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "kubescale-balloon",
            },
            "subjects": [
                {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": LIMITED_USER}
            ],
        },
        ok=(201, 409),
    )


def make_nodes(api, names):
    for name in names:
        api.admin.request("POST", "/api/v1/nodes", {"metadata": {"name": name}}, ok=(201, 409))
        api.admin.merge_patch(
            f"/api/v1/nodes/{name}/status",
            {"status": {"capacity": NODE_SIZE, "allocatable": NODE_SIZE}},
        )


@pytest.fixture(scope="module")
def cluster(apiserver):
    grant_balloon_rbac(apiserver)
    make_nodes(apiserver, ["balloon-n1", "balloon-n2"])
    return apiserver


class Balloons:
    """One test's balloons: its own label value, namespace and PriorityClasses."""

    def __init__(self, api, ns, uniq):
        self.api, self.ns, self.uniq = api, ns, uniq
        self.selector = f"balloon={uniq}"
        self.base = f"/api/v1/namespaces/{ns}/pods"

    def priority_class(self, name, value):
        self.api.admin.create(
            "/apis/scheduling.k8s.io/v1/priorityclasses",
            {"metadata": {"name": f"{name}-{self.uniq}"}, "value": value},
        )
        return f"{name}-{self.uniq}"

    def create(self, name, node=None, phase=None, labels=None, **kw):
        labels = {"balloon": self.uniq} if labels is None else labels
        self.api.admin.create(self.base, pod_manifest(name, node=node, labels=labels, **kw))
        if phase:
            self.status(name, {"phase": phase})

    def status(self, name, status):
        self.api.admin.merge_patch(f"{self.base}/{name}/status", {"status": status})

    def delete(self, name):
        self.api.admin.delete(f"{self.base}/{name}")


@pytest.fixture
def balloons(cluster, namespace, uniq):
    return Balloons(cluster, namespace, uniq)


@pytest.fixture
def collector(cluster, tmp_path):
    made = []

    def make(selector, *flags):
        kubeconfig = cluster.write_kubeconfig(tmp_path / "kubeconfig", token=cluster.limited_token)
        args, classes = parse(
            [
                "--mode",
                "cluster",
                "--balloon.selector",
                selector,
                "--kube.kubeconfig",
                kubeconfig,
                *flags,
            ]
        )
        assert classes == [BalloonCollector]
        c = BalloonCollector(args)
        made.append(c)
        c.start()
        return c

    yield make
    for c in made:
        c.close()


def scrape(c):
    """One scrape as the exporter serves it: the collector's series and the watches' health."""
    return make_scraper([c]).scrape(10).families


def value(c, name, **labels):
    return sample(scrape(c), name, **labels)


def eventually(c, name, expected, timeout=10, **labels):
    """Wait for the cache to catch up with what the test just did."""
    seen = []

    def check():
        seen.append(value(c, name, **labels))
        return seen[-1] == expected

    assert wait_until(check, timeout), f"{name}{labels}: {seen[-1]} != {expected}"


def test_every_metric(balloons, collector):
    b = balloons
    normal = b.priority_class("balloon", -1)
    expendable = b.priority_class("expendable", -20)
    two_cpus = {"cpu": "2", "memory": "4Gi"}
    b.create("run1", node="balloon-n1", phase="Running", priority_class=normal, requests=two_cpus)
    b.create(
        "run2",
        node="balloon-n2",
        phase="Running",
        priority_class=normal,
        requests={"cpu": "1", "memory": "2Gi", "nvidia.com/gpu": "8"},
    )
    b.create(
        "cheap",
        node="balloon-n1",
        phase="Running",
        priority_class=expendable,
        requests={"cpu": "500m", "memory": "512Mi"},
    )
    b.create("wait", priority_class=normal, requests=two_cpus)
    b.create("huge", priority_class=normal, requests={"cpu": "64"})
    b.create("nopri", requests=two_cpus)  # priority 0: nothing preempts it
    b.create("real", node="balloon-n1", phase="Running", labels={}, requests=two_cpus)

    c = collector(b.selector)
    fams = scrape(c)
    assert sample(fams, "kubescale_balloon_pods", phase="Running") == 3
    assert sample(fams, "kubescale_balloon_pods", phase="Pending") == 3
    assert sample(fams, "kubescale_balloon_pods", phase="Failed") == 0
    assert sample(fams, "kubescale_balloon_reserved", resource="cpu", unit="core") == 3.5
    assert (
        sample(fams, "kubescale_balloon_reserved", resource="memory", unit="byte")
        == (4 + 2) * 2**30 + 512 * 2**20
    )
    assert (
        sample(fams, "kubescale_balloon_reserved", resource="nvidia_com_gpu", unit="integer") == 8
    )
    assert sample(fams, "kubescale_balloon_nodes") == 2
    assert sample(fams, "kubescale_balloon_preemptions_total") == 0
    for reason, count in {
        "priority_below_autoscaler_cutoff": 1,
        "priority_not_negative": 1,
        "priority_class_missing": 0,
        "requests_fit_no_node": 1,
        "no_requests": 0,
    }.items():
        assert sample(fams, "kubescale_balloon_misconfigured", reason=reason) == count, reason
    for resource in ("pods", "priorityclasses", "nodes"):
        assert sample(fams, "kubescale_kube_watch_up", resource=resource) == 1
        assert sample(fams, "kubescale_kube_relists_total", resource=resource) == 0

    # The oldest Pending balloon's wait grows with the clock.
    first = sample(fams, "kubescale_balloon_pending_oldest_seconds")
    time.sleep(1.1)
    later = value(c, "kubescale_balloon_pending_oldest_seconds")
    assert 0 <= first < 60 and later - first >= 1

    # The kubelet starts the waiting balloon on a node: no longer waiting, now reserving.
    b.api.admin.request(
        "POST",
        f"{b.base}/wait/binding",
        {
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": "wait"},
            "target": {"apiVersion": "v1", "kind": "Node", "name": "balloon-n2"},
        },
    )
    b.status("wait", {"phase": "Running"})
    eventually(c, "kubescale_balloon_reserved", 5.5, resource="cpu", unit="core")
    assert value(c, "kubescale_balloon_pods", phase="Pending") == 2

    # A balloon deleted without the scheduler's mark (a rollout, a person) is not preempted.
    b.delete("run1")
    b.delete("huge")
    eventually(c, "kubescale_balloon_misconfigured", 0, reason="requests_fit_no_node")
    assert value(c, "kubescale_balloon_preemptions_total") == 0
    # The scheduler marks its victim before deleting it: counted at the mark ...
    b.status(
        "cheap",
        {
            "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
            ]
        },
    )
    eventually(c, "kubescale_balloon_preemptions_total", 1)
    # ... and once only, not again at its deletion.
    b.status(
        "run2",
        {
            "conditions": [
                {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
            ]
        },
    )
    eventually(c, "kubescale_balloon_preemptions_total", 2)
    b.delete("run2")
    eventually(c, "kubescale_balloon_nodes", 2)  # wait and cheap remain, on n2 and n1
    time.sleep(0.5)
    assert value(c, "kubescale_balloon_preemptions_total") == 2

    # A PriorityClass deleted under its balloons.
    b.api.admin.delete(f"/apis/scheduling.k8s.io/v1/priorityclasses/{expendable}")
    eventually(c, "kubescale_balloon_misconfigured", 1, reason="priority_class_missing")
    # The pod keeps the priority it was admitted with: still below the cutoff.
    assert (
        value(c, "kubescale_balloon_misconfigured", reason="priority_below_autoscaler_cutoff") == 1
    )


def test_a_preempted_balloon_the_kubelet_marked_failed_counts_once(balloons, collector):
    """The kubelet sets a terminal phase on a pod being deleted; the DELETED event then
    shows Failed, yet the balloon was running when the scheduler preempted it."""
    b = balloons
    b.create("victim", node="balloon-n1", phase="Running", requests={"cpu": "1"})
    b.create("never-ran", requests={"cpu": "1"})
    c = collector(b.selector)
    scrape(c)
    mark = {"type": "DisruptionTarget", "status": "True", "reason": "PreemptionByScheduler"}
    b.status("victim", {"phase": "Failed", "conditions": [mark]})
    eventually(c, "kubescale_balloon_pods", 1, phase="Failed")
    b.delete("victim")
    b.delete("never-ran")
    eventually(c, "kubescale_balloon_pods", 0, phase="Pending")
    assert value(c, "kubescale_balloon_preemptions_total") == 1


def test_every_informers_health_is_in_the_scrape_once(balloons, collector, cluster, tmp_path):
    """Another collector's informer (here: imagepull_events' events watch) shows up in the
    scrape's health families beside the balloon collector's own, each family once."""
    args, classes = parse(
        [
            "--mode",
            "cluster",
            "--collector.disable-defaults",
            "--collector.imagepull_events",
            "--kube.kubeconfig",
            cluster.write_kubeconfig(tmp_path / "events-kc"),
        ]
    )
    assert classes == [ImagePullEventsCollector]
    events = ImagePullEventsCollector(args)
    events.start()
    try:
        assert events.informer.wait_synced(10)
        c = collector(balloons.selector)
        fams = make_scraper([c, events]).scrape(10).families
        names = [f.name for f in fams]
        assert len(names) == len(set(names))
        for resource in ("pods", "priorityclasses", "nodes", "events"):
            assert sample(fams, "kubescale_kube_watch_up", resource=resource) == 1
    finally:
        events.close()
    assert "events" not in {
        s.labels["resource"]
        for f in scrape(c)
        for s in f.samples
        if s.name == "kubescale_kube_watch_up"
    }


def test_past_the_cap_the_collector_fails_and_recovers_when_balloons_go(
    balloons, collector, monkeypatch
):
    monkeypatch.setattr(informer_module, "FULL_RETRY_SECONDS", 0.5)
    # The cap is per watch: the shared API server's nodes and PriorityClasses fit in it.
    others = (
        len(balloons.api.admin.get(path)["items"])
        for path in ("/api/v1/nodes", "/apis/scheduling.k8s.io/v1/priorityclasses")
    )
    cap = max(others)
    for i in range(cap + 1):
        balloons.create(f"b{i}", requests={"cpu": "1"})
    c = collector(balloons.selector, "--balloon.max-cached-objects", str(cap))
    families = scrape(c)
    assert sample(families, "kubescale_scrape_collector_success", collector="balloon") == 0
    assert sample(families, "kubescale_kube_watch_up", resource="pods") == 0
    with pytest.raises(KeyError):
        sample(families, "kubescale_balloon_pods", phase="Pending")
    balloons.delete("b0")

    def succeeds():
        return value(c, "kubescale_scrape_collector_success", collector="balloon") == 1

    assert wait_until(succeeds, 10)
    assert value(c, "kubescale_balloon_pods", phase="Pending") == cap


def test_findings_for_check(balloons, collector):
    b = balloons
    low = b.priority_class("low", -50)
    b.create("a", node="balloon-n1", phase="Running", priority_class=low, requests={"cpu": "1"})
    c = collector(b.selector)
    scrape(c)
    found = {(f.severity, f.summary) for f in c.advise(c.observe())}
    assert (
        "critical",
        "1 balloon pod(s): priority below the autoscaler's "
        "--expendable-pods-priority-cutoff: it never adds a node for them",
    ) in found
    assert ("info", "1 balloon(s) Running on 1 node(s), holding 1 CPU") in found
    # With the autoscaler's cutoff set lower, the same balloon is fine.
    c2 = collector(b.selector, "--balloon.autoscaler-cutoff", "-100")
    scrape(c2)
    assert not [f for f in c2.advise(c2.observe()) if f.actionable]


def test_selector_matching_nothing_is_a_finding(balloons, collector):
    c = collector(f"balloon=nothing-{balloons.uniq}")
    assert value(c, "kubescale_balloon_pods", phase="Running") == 0
    assert value(c, "kubescale_balloon_pending_oldest_seconds") == 0
    [finding] = c.advise(c.observe())
    assert finding.severity == "warning" and "matches no pods" in finding.summary


# ---- the whole exporter, as a process -------------------------------------------------


def run_exporter(*argv, **kw):
    """The exporter run to its exit, from the repository (no PYTHONPATH needed)."""
    return subprocess.run(
        [sys.executable, "-m", "kube_scale_exporter", *argv],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        cwd=REPO,
        **kw,
    )


@pytest.mark.parametrize(
    "argv, flag",
    [
        (["--balloon.selector", "a in b"], "--balloon.selector"),
        (["--balloon.selector", "a=b", "--kube.kubeconfig", "/nonexistent"], "--kube.kubeconfig"),
        (
            ["--balloon.selector", "a=b", "--balloon.autoscaler-cutoff", "low"],
            "--balloon.autoscaler-cutoff",
        ),
    ],
)
def test_bad_flags_exit_2_naming_the_flag(argv, flag):
    result = run_exporter("--mode", "cluster", *argv)
    assert result.returncode == 2 and flag in result.stderr, result.stderr
    assert result.stderr.count(f"{flag}:") == 1, result.stderr  # named once, not twice


def test_no_api_configuration_exits_2(monkeypatch):
    env = {
        k: v
        for k, v in __import__("os").environ.items()
        if k not in ("KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT")
    }
    result = run_exporter("--mode", "cluster", "--balloon.selector", "a=b", env=env)
    assert result.returncode == 2 and "--kube.kubeconfig" in result.stderr, result.stderr


def test_balloon_is_cluster_mode_only(cluster, tmp_path):
    kc = cluster.write_kubeconfig(tmp_path / "kc")
    result = run_exporter("--balloon.selector", "a=b", "--kube.kubeconfig", kc)
    assert result.returncode == 2 and "--mode cluster" in result.stderr, result.stderr


def test_check_subcommand_prints_the_advice(balloons, tmp_path):
    b = balloons
    b.create("nopri", node="balloon-n1", phase="Running", requests={"cpu": "1"})
    kc = b.api.write_kubeconfig(tmp_path / "kc", token=b.api.limited_token)
    result = run_exporter(
        "check", "--mode", "cluster", "--balloon.selector", b.selector, "--kube.kubeconfig", kc
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "CRITICAL 1 balloon pod(s): priority 0 or more" in result.stdout
    assert "negative value" in result.stdout


def test_served_scrape_fails_while_the_api_is_down_and_recovers(fresh_apiserver, tmp_path):
    api = fresh_apiserver()
    kc = api.write_kubeconfig(tmp_path / "kc")
    api.stop()
    exporter = start_exporter(
        ["--mode", "cluster", "--balloon.selector", "x=y", "--kube.kubeconfig", kc], tmp_path
    )
    port = exporter.port
    try:

        def scrape_success():
            text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=15).text
            return sample(
                parse_exposition(text), "kubescale_scrape_collector_success", collector="balloon"
            )

        assert wait_until(lambda: _answers(port), 15)
        start = time.monotonic()
        assert scrape_success() == 0
        assert time.monotonic() - start < 10  # answered within the scrape timeout
        api.start()
        assert wait_until(lambda: scrape_success() == 1, 30)
        text = requests.get(f"http://127.0.0.1:{port}/metrics", timeout=15).text
        assert 'kubescale_kube_watch_up{resource="pods"} 1.0' in text
        assert 'kubescale_balloon_pods{phase="Running"} 0.0' in text
    finally:
        exporter.proc.stop()


def _answers(port):
    try:
        requests.get(f"http://127.0.0.1:{port}/healthz", timeout=1)
        return True
    except requests.RequestException:
        return False
