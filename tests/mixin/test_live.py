"""The rules against the real exporter: Prometheus loads the generated rules and scrapes
kube-scale-exporter in node and cluster mode (and a real etcd filled past its quota), every
second. The recording rules must see the series the exporter really serves. The whole stack
runs once per Prometheus release the tests run: 3.13, the LTS, and 3.16, the newest.
"""

import re
import socket
import subprocess
import time

import pytest
import yaml

from kube_scale_exporter.budgets import CLUSTER_SERIES, NODE_SERIES
from testbed import builds
from testbed.etcd_server import EtcdServer
from testbed.ports import free_port
from testbed.prometheus import PrometheusServer
from tests.mixin.support import REPO, PROMETHEUS_RELEASES, prometheus_binary, prometheus_version
from tools import demo

pytestmark = pytest.mark.integration


def working_collectors():
    """Collectors that must succeed in the live stack: those needing only this host's kernel,
    and etcd, which the stack provides. Others (containerd, the Kubernetes API) may fail here."""
    return {"neighbor", "neighbor_gc", "etcd"}


def every_second(workdir, rule_files=demo.RULE_FILES):
    """The generated rule files with every group on the stack's own interval: the groups on
    nodeAlertInterval and slowInterval would otherwise run every 2 and 4 minutes, longer than
    any wait here."""
    out = []
    for path in rule_files:
        rules = yaml.safe_load(path.read_text())
        for group in rules["groups"]:
            group.pop("interval", None)
        copy = workdir / path.name
        copy.write_text(yaml.safe_dump(rules, sort_keys=False))
        out.append(copy)
    return out


class Live:
    def __init__(self, prom, etcd_url, release, version):
        self.prom = prom
        self.etcd_url = etcd_url
        self.release = release
        self.version = version

    def values(self, expr):
        """{frozenset(labels): value} of an instant query."""
        return {frozenset(r["metric"].items()): float(r["value"][1]) for r in self.prom.query(expr)}

    def wait_for_evaluations(self, n, timeout=30):
        """Until every rule group has been evaluated `n` more times than now."""
        self.prom.wait_for_evaluations(n, timeout)

    def wait_for(self, expr, until=bool, timeout=30):
        """Poll an instant query until `until(result)` holds: targets and rule groups start
        at different moments, and the etcd collector refreshes on its own interval."""
        deadline = time.monotonic() + timeout
        while True:
            found = self.values(expr)
            if until(found):
                return found
            if time.monotonic() > deadline:
                pytest.fail(f"{expr} gave {found} after {timeout}s")
            time.sleep(0.5)


def by(label, found):
    return {dict(k)[label]: v for k, v in found.items()}


@pytest.fixture(scope="module", params=PROMETHEUS_RELEASES, ids=lambda r: f"prometheus-{r}")
def live(request, tmp_path_factory):
    release = request.param
    binary = prometheus_binary(release, "prometheus")
    workdir = tmp_path_factory.mktemp(f"live-{release}")
    procs = []
    try:
        node_port, cluster_port = free_port(), free_port()
        prom = PrometheusServer(workdir, {}, binary=binary)
        procs.append(demo.exporter(["--mode", "node"], node_port, workdir, "exporter-node"))
        etcd_server = EtcdServer(workdir, name="etcd-0", quota_bytes=demo.QUOTA).start()
        procs.append(etcd_server)
        etcd_url = etcd_server.client_url
        etcd = demo.Etcd(etcd_url)
        while etcd.put_object():
            pass
        cluster_args = [
            "--mode",
            "cluster",
            "--etcd.cluster",
            f"main={etcd_url}",
            "--etcd.min-interval",
            "1",
            "--etcd.keys-interval",
            "1",
        ]
        procs.append(demo.exporter(cluster_args, cluster_port, workdir, "exporter-cluster"))
        prom.config = demo.prometheus_config(
            node_port, cluster_port, prom.port, interval="1s", rule_files=every_second(workdir)
        )
        procs.append(prom)
        yield Live(prom.start(), etcd_url, release, prometheus_version(binary))
    finally:
        for proc in reversed(procs):
            proc.stop()


def test_the_prometheus_release_that_ran(live, record_property):
    info = live.prom.session.get(live.prom.url + "/api/v1/status/buildinfo", timeout=5).json()[
        "data"
    ]
    record_property("prometheus_version", info["version"])
    print(f"live stack on Prometheus {info['version']}")
    assert info["version"] == live.version
    assert info["version"].startswith(live.release + ".")


def test_exporter_health_rules_see_both_jobs(live):
    both = {demo.NODE_JOB: 1.0, demo.CLUSTER_JOB: 1.0}
    live.wait_for("cluster_job:kubescale_exporter_up:avg", lambda f: by("job", f) == both)
    live.wait_for("cluster_job_version:kubescale_build_info:count", lambda f: by("job", f) == both)
    samples = live.wait_for(
        "cluster_job:kubescale_exporter_samples_scraped:max", lambda f: len(f) == 2
    )
    budgets = {demo.NODE_JOB: NODE_SERIES, demo.CLUSTER_JOB: CLUSTER_SERIES}
    for labels, value in samples.items():
        assert 0 < value <= budgets[dict(labels)["job"]]


def test_collector_failures_rule_sees_the_working_collectors_succeed(live):
    expected = working_collectors()
    live.wait_for(
        "cluster_job_collector:kubescale_scrape_collector_failures:sum",
        lambda f: all(by("collector", f).get(name) == 0.0 for name in expected),
    )


def test_neighbor_rules_follow_the_kernel(live):
    usage = live.wait_for("node_family:kubescale_neighbor_usage:ratio", lambda f: len(f) == 2)
    assert {dict(k)["family"] for k in usage} == {"ipv4", "ipv6"}
    assert {dict(k)["node"] for k in usage} == {socket.gethostname()}
    assert all(0 <= v < 1 for v in usage.values())
    at_default = live.wait_for(
        "cluster_family:kubescale_neighbor_nodes_at_kernel_default:sum", lambda f: len(f) == 2
    )
    for labels, value in at_default.items():
        family = dict(labels)["family"]
        with open(f"/proc/sys/net/{family}/neigh/default/gc_thresh3") as f:
            assert value == float(int(f.read()) <= 1024), family


def test_etcd_rules_and_alert_see_a_real_nospace(live):
    live.wait_for(
        "etcd_cluster_member:kubescale_etcd_quota_bytes:max",
        lambda f: list(f.values()) == [float(demo.QUOTA)],
    )
    live.wait_for(
        "etcd_cluster_member:kubescale_etcd_quota_usage:ratio",
        lambda f: len(f) == 1 and list(f.values())[0] >= 0.95,
    )
    live.wait_for(
        'etcd_cluster_member_alarm:kubescale_etcd_alarm_active:max{alarm="NOSPACE"}',
        lambda f: list(f.values()) == [1.0],
    )
    # Three events for every two pods were written.
    live.wait_for(
        "etcd_cluster:kubescale_etcd_events_keys:ratio",
        lambda f: len(f) == 1 and abs(list(f.values())[0] - 0.6) < 0.02,
    )
    live.wait_for(
        'ALERTS{alertname="KubeScaleEtcdAlarmActive"}', lambda f: set(by("alarm", f)) == {"NOSPACE"}
    )


def test_blind_spot_alerts_stay_quiet_while_everything_reports(live):
    """The "we cannot see it" companions read real series: nothing is missing here, so none
    of them may even be pending once the rules have run on scraped data."""
    live.wait_for(
        "cluster_job:kubescale_exporter_targets_down:sum",
        lambda f: by("job", f) == {demo.NODE_JOB: 0.0, demo.CLUSTER_JOB: 0.0},
    )
    live.wait_for('kubescale_etcd_up{etcd_cluster="main"}', lambda f: list(f.values()) == [1.0])
    live.wait_for("prometheus_tsdb_head_series", lambda f: len(f) == 1)
    live.wait_for_evaluations(3)  # every rule group has run on those series
    quiet = 'ALERTS{alertname=~"KubeScale(ExporterTargetMissing|EtcdNotObserved|PrometheusNotObserved)"}'
    assert live.values(quiet) == {}


def test_pint_online_checks_find_every_series_the_rules_read(live, tmp_path):
    """pint's online checks (every series a rule reads exists, with the labels it selects;
    ranges within retention; ...) against this Prometheus, on the rule files `make lint`
    checks offline; .pint.hcl lists the series this stack cannot have, with the reason."""
    (rule_files,) = re.findall(r"^RULE_FILES = (.*)$", (REPO / "Makefile").read_text(), re.M)
    config = tmp_path / "pint.hcl"
    config.write_text(
        (REPO / ".pint.hcl").read_text()
        + f'\nprometheus "live" {{\n  uri = "{live.prom.url}"\n  timeout = "60s"\n}}\n'
    )
    # etcd's performance series, the last to start (the etcd collector's first reading of
    # its /metrics), there for longer than the 20s .pint.hcl looks back over.
    first_seen = "min_over_time(timestamp(kubescale_etcd_range_requests_total)[2m:1s])"
    live.wait_for(f"time() - {first_seen} > 25", timeout=90)
    # A query that fails to execute (many-to-many matching) is a 422, as a query over the
    # sample limit is: the series KubeScalePrometheusQueriesHitSampleLimit counts.
    refused = live.prom.session.get(
        live.prom.url + "/api/v1/query", params={"query": "up * on () up"}, timeout=5
    )
    assert refused.status_code == 422, refused.text
    live.wait_for('prometheus_http_requests_total{code="422", job="prometheus-k8s"}')
    live.wait_for_evaluations(3)  # recording rules the others read have samples
    argv = [builds.pint_binary(), "--no-color", "-c", str(config), "lint"]
    out = subprocess.run(
        [*argv, "--min-severity=info", "--fail-on=bug", *rule_files.split()],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    text = out.stdout + out.stderr
    assert "online=true" in text
    assert out.returncode == 0, text
    # Left as warnings: series .pint.hcl lists as missing here (pint names the pattern), and
    # recording rules over them. Nothing else.
    ignored = [
        re.compile(pattern)
        for pattern in re.findall(r'^\s*"([^"]+)",', (REPO / ".pint.hcl").read_text(), re.M)
    ]
    # pint also calls a series "only sometimes present" when it started after its target's
    # first scrape, which in a stack a minute old is most: accepted where the series has a
    # sample at every scrape of its target over the last 30s.
    unexplained = []
    for problem in re.split(r"\n(?=(?:Bug|Warning|Information|Fatal): )", text)[1:]:
        flat = " ".join(problem.split())
        late = re.search(r"The `([^`]+)` metric is only sometimes present", flat)
        if "(promql/series)" in flat and late:
            gaps = live.values(
                f"count_over_time({late.group(1)}[30s]) != on (job, instance) group_left"
                " count_over_time(up[30s])"
            )
            if live.values(late.group(1)) and not gaps:
                continue
        series = re.search(r"didn't have any series for the `([^`]+)` metric", flat)
        if not (
            "(promql/series)" in flat
            and (
                "check ignore regexp" in flat or "found a recording rule that generates it" in flat
            )
            and series
            and any(p.fullmatch(series.group(1)) for p in ignored)
        ):
            unexplained.append(problem)
    assert unexplained == [], "\n".join(unexplained)
