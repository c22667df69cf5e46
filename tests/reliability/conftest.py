"""Real components for the fault tests: etcd, containerd, kube-apiserver (one for the
session, behind a fresh fault proxy per test), the exporter.

Each test gets its own servers (faults stop and pause them) in a short temp dir, so
containerd's socket path stays under the 108-byte limit.
"""

import shutil
import tempfile
import time

import pytest

from kube_scale_exporter.collectors import COLLECTORS as REGISTERED
from testbed.containerd_server import ContainerdServer
from testbed.etcd_server import CONTROL_PLANE_VERSION, EtcdServer
from testbed.faultproxy import FaultProxy
from testbed.metrics import wait_until
from testbed.kube_apiserver import apiserver_on_new_etcd
from tests.reliability.running import RunningExporter

# The cluster-mode exporter under test runs every cluster collector (each named on its
# command line: one without the options it needs exits 2), and the watch the faults are aimed at.
COLLECTORS = {c.name for c in REGISTERED if "cluster" in c.modes}
WATCH = r"/api/v1/pods\?.*watch=1"

# The times the fault tables in docs/reliability.md quote, as this run measured them.
FIGURES = {}


def timed(figure, wait):
    """Run wait(), keep how long it took as FIGURES[figure] and return what it returned."""
    start = time.monotonic()
    result = wait()
    FIGURES[figure] = time.monotonic() - start
    return result


def pytest_terminal_summary(terminalreporter):
    if FIGURES:
        terminalreporter.write_sep("-", "fault figures (s), docs/reliability.md")
        for figure, seconds in FIGURES.items():
            terminalreporter.write_line(f"{figure}: {seconds:.2f}")


@pytest.fixture
def workdir():
    path = tempfile.mkdtemp(prefix="rel-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def etcd(workdir):
    server = EtcdServer(f"{workdir}/etcd", version=CONTROL_PLANE_VERSION).start()
    yield server
    server.stop()


@pytest.fixture
def containerd(workdir):
    server = ContainerdServer(f"{workdir}/cd").start()
    yield server
    server.stop()


@pytest.fixture
def run_exporter(workdir):
    """run_exporter(flags, module="kube_scale_exporter") -> a started RunningExporter, stopped after."""
    started = []

    def run(flags, module="kube_scale_exporter"):
        exporter = RunningExporter(flags, workdir, module=module).start()
        started.append(exporter)
        return exporter

    yield run
    for exporter in started:
        exporter.stop()


@pytest.fixture(scope="session")
def cluster(tmp_path_factory):
    with apiserver_on_new_etcd(tmp_path_factory.mktemp("cluster")) as api:
        yield api


@pytest.fixture
def proxy(cluster):
    p = FaultProxy(
        cluster.server, upstream_verify=cluster.ca, certfile=cluster.ca, keyfile=cluster.serving_key
    ).start()
    yield p
    p.stop()


@pytest.fixture
def cluster_exporter(cluster, proxy, run_exporter, workdir):
    kubeconfig = cluster.write_kubeconfig(f"{workdir}/kubeconfig", server=proxy.url)
    exporter = run_exporter(
        [
            "--mode",
            "cluster",
            "--kube.kubeconfig",
            kubeconfig,
            "--balloon.selector",
            "run=overprovisioning",
            "--collector.imagepull_events",
            "--etcd.cluster",
            f"main={cluster.etcd.client_url}",
            "--etcd.timeout",
            "1",
            "--etcd.min-interval",
            "0.5",
            *(f"--collector.{name}" for name in sorted(COLLECTORS)),
        ]
    )
    exporter.wait_for(
        lambda s: (
            all(s.success.get(n) == 1 for n in COLLECTORS)
            and s.value("kubescale_kube_watch_up", resource="pods") == 1
        ),
        within=15,
    )
    # watch_up is 1 from the list on, before the watch request has an answer: the tests
    # cut the pods watch to make the informer meet a fault, so it must be open at the
    # proxy first. It opened 16-130 ms after the list and 37-204 ms before the wait above
    # ended on an idle machine; a loaded API server answering later left nothing to cut
    # (test_hostile_kube's "the informer did not watch again").
    assert wait_until(lambda: proxy.open_streams(WATCH) >= 1, 15), "no pods watch at the proxy"
    return exporter
