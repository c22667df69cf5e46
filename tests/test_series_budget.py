"""Node mode's series budget (kube_scale_exporter/budgets.py, docs/sizing.md) with the
default collectors, measured on the real exporter process configured as the DaemonSet runs it.

Real backends for every default node collector: the host's neighbor tables over netlink,
a real containerd for imagepull, and a real etcd + kube-apiserver for its pod watch (whose
kubescale_kube_* health series count too). The kubelet config file is given, as the
DaemonSet mounts it, so the kubelet series are in the count; so is containerd's config
(the DaemonSet mounts /etc/containerd), for its two settings.
"""

import shutil
import tempfile
from pathlib import Path

import pytest
import requests

from kube_scale_exporter.budgets import NODE_SERIES
from kube_scale_exporter.collectors import COLLECTORS
from testbed.containerd_server import ContainerdServer
from testbed.exporter import start_exporter
from testbed.golden import promtool_check, series_count
from testbed.kube_apiserver import apiserver_on_new_etcd
from testbed.metrics import parse_exposition, sample, wait_until

pytestmark = pytest.mark.integration

DEFAULT_NODE_COLLECTORS = {c.name for c in COLLECTORS if "node" in c.modes and c.default_enabled}


@pytest.fixture
def workdir():
    # Short, so unix socket paths stay under the 108-byte limit.
    path = tempfile.mkdtemp(prefix="sb-", dir="/tmp")
    yield Path(path)
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def apiserver(workdir):
    with apiserver_on_new_etcd(workdir) as api:
        yield api


@pytest.fixture
def containerd(workdir):
    server = ContainerdServer(workdir / "cd").start()
    yield server
    server.stop()


def test_node_mode_default_collectors_stay_within_the_series_budget(workdir, apiserver, containerd):
    kubelet = workdir / "kubelet.yaml"
    kubelet.write_text(
        "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
        "serializeImagePulls: false\nmaxParallelImagePulls: 4\n"
    )
    exporter = start_exporter(
        [
            "--mode",
            "node",
            "--collector.imagepull",
            "--containerd.address",
            containerd.address,
            "--containerd.config",
            containerd.config,
            "--kubelet.config-file",
            str(kubelet),
            "--kube.kubeconfig",
            apiserver.write_kubeconfig(workdir / "kubeconfig"),
            "--kube.node-name",
            "node-a",
        ],
        workdir,
    )
    try:
        scraped = {}

        def watch_synced():
            scraped["text"] = requests.get(exporter.url + "/metrics", timeout=10).text
            families = parse_exposition(scraped["text"])
            try:
                sample(families, "kubescale_image_pulls_queued")  # present once synced
                return sample(families, "kubescale_kube_watch_up", resource="pods") == 1
            except KeyError:
                return False

        assert wait_until(watch_synced, timeout=30), scraped.get("text")
    finally:
        exporter.proc.stop()
    text = scraped["text"]
    families = parse_exposition(text)
    promtool_check(text)
    succeeded = {
        s.labels["collector"]
        for f in families
        for s in f.samples
        if s.name == "kubescale_scrape_collector_success" and s.value == 1
    }
    ran = {
        s.labels["collector"]
        for f in families
        for s in f.samples
        if s.name == "kubescale_scrape_collector_success"
    }
    assert ran == succeeded == DEFAULT_NODE_COLLECTORS, text
    assert sample(families, "kubescale_kubelet_max_parallel_image_pulls") == 4
    assert sample(families, "kubescale_containerd_max_concurrent_downloads") == 3
    assert sample(families, "kubescale_image_pulls_failing") == 0
    count = series_count(text)
    print(f"node mode, default collectors: {count} series (budget {NODE_SERIES})")
    assert count <= NODE_SERIES, text
