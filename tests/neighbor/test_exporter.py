"""The neighbor collectors inside the real exporter process: series budget, a failing
netlink, recovery, and `check`."""

import json
import resource
import subprocess
import sys
from pathlib import Path

import pytest
import requests

from kube_scale_exporter.scrape import Scraper
from testbed.exporter import MODULE, REPO, exporter_argv, start_exporter
from testbed.golden import promtool_check, series_count
from testbed.metrics import parse_exposition, sample
from testbed.netns import neighbor_adds
from testbed.ports import free_port
from testbed.procs import Proc, wait_for_port
from tests.neighbor.test_kernel import proc_stat

SERIES_BUDGET = 40
NEIGHBOR_METRICS = {
    "kubescale_neighbor_entries",
    "kubescale_neighbor_gc_thresh1",
    "kubescale_neighbor_gc_thresh2",
    "kubescale_neighbor_gc_thresh3",
    "kubescale_neighbor_table_overflows",
    "kubescale_neighbor_forced_gc_runs",
    "kubescale_neighbor_allocations",
    "kubescale_neighbor_destroys",
    "kubescale_neighbor_resolution_failures",
    "kubescale_neighbor_unresolved_discards",
    "kubescale_neighbor_gc_eligible_entries",
}


# Runs a command with no capabilities at all (CapEff 0), as a locked-down pod would.
NO_CAPABILITIES = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs"]


def start(tmp_path, *argv, module=MODULE, prefix=()):
    exporter = start_exporter(
        ["--collector.disable-defaults", "--collector.neighbor", "--collector.neighbor_gc", *argv],
        tmp_path,
        module=module,
        prefix=prefix,
    )
    return exporter.proc, exporter.url + "/metrics"


@pytest.fixture
def exporter(tmp_path):
    procs = []

    def run(*argv, module=MODULE, prefix=()):
        proc, url = start(tmp_path, *argv, module=module, prefix=prefix)
        procs.append(proc)
        return proc, url

    yield run
    for p in procs:
        p.stop()


@pytest.mark.integration
def test_node_mode_scrape_stays_within_the_series_budget(exporter):
    """Default node-mode collectors, run without any capability (netlink dumps and
    /proc/net/stat need none)."""
    proc, url = exporter(prefix=NO_CAPABILITIES)
    status = Path(f"/proc/{proc.pid}/status").read_text()
    assert "CapEff:\t0000000000000000" in status
    text = requests.get(url, timeout=10).text
    families = parse_exposition(text)
    promtool_check(text)
    assert {f.name for f in families if f.name.startswith("kubescale_neighbor")} == NEIGHBOR_METRICS
    for name in ("neighbor", "neighbor_gc"):
        assert sample(families, "kubescale_scrape_collector_success", collector=name) == 1
    assert series_count(text) <= SERIES_BUDGET, text


@pytest.mark.integration
def test_netlink_refused_by_seccomp_fails_only_the_collectors(exporter):
    """The process answers, reports both collectors failed, and logs why (see no_netlink)."""
    proc, url = exporter(module="tests.neighbor.no_netlink")
    for _ in range(2):  # the second scrape too: a failure is not a crash
        reply = requests.get(url, timeout=10)
        assert reply.status_code == 200
        families = parse_exposition(reply.text)
        assert sample(families, "kubescale_build_info") == 1
        for name in ("neighbor", "neighbor_gc"):
            assert sample(families, "kubescale_scrape_collector_success", collector=name) == 0
        assert not [f for f in families if f.name.startswith("kubescale_neighbor")]
    assert proc.alive()
    assert (
        "cannot open a NETLINK_ROUTE socket: Address family not supported by protocol"
        in proc.log_tail()
    )
    assert "allow AF_NETLINK sockets in the pod's seccomp profile" in proc.log_tail()


@pytest.mark.unit
def test_collector_recovers_when_netlink_comes_back(collectors):
    """No descriptors left (RLIMIT_NOFILE 0, a real EMFILE) then restored: the same
    collector, through the scraper, fails with a clear error and then recovers by itself."""
    (neighbor,) = collectors("--collector.neighbor")
    scraper = Scraper([neighbor])
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (0, hard))
        failed = scraper.scrape(timeout=5).families
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    assert sample(failed, "kubescale_scrape_collector_success", collector="neighbor") == 0
    error = scraper.last_error("neighbor")
    assert error.startswith(
        "NetlinkUnavailable: [Errno 24] cannot open a NETLINK_ROUTE socket: Too many open files"
    ), error
    families = scraper.scrape(timeout=5).families
    scraper.close()
    assert sample(families, "kubescale_scrape_collector_success", collector="neighbor") == 1
    assert scraper.last_error("neighbor") is None
    assert sample(families, "kubescale_neighbor_gc_thresh3", family="ipv4") > 0


def run_check(*argv, within=()):
    """`check` of the neighbor collector, run from the repository; `within` prefixes the
    command (e.g. `ip netns exec NAME`)."""
    return subprocess.run(
        [
            *within,
            sys.executable,
            "-m",
            "kube_scale_exporter",
            "check",
            "--collector.disable-defaults",
            "--collector.neighbor",
            *argv,
        ],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


@pytest.mark.integration
def test_check_prints_the_sysctl_lines_for_expected_peers():
    """Sized for 100,000 peers: thresh3 = 2 x that, rounded up to 1024; 3/4 and 1/4 of it."""
    result = run_check("--neighbor.expected-peers", "100000")
    assert result.returncode == 1, result.stdout + result.stderr
    thresh3 = 1024 * -(-200_000 // 1024)
    for family in ("ipv4", "ipv6"):
        assert f"net.{family}.neigh.default.gc_thresh3 = {thresh3}" in result.stdout
        assert f"net.{family}.neigh.default.gc_thresh2 = {thresh3 * 3 // 4}" in result.stdout
        assert f"net.{family}.neigh.default.gc_thresh1 = {thresh3 // 4}" in result.stdout
    assert "100000 expected peers" in result.stdout


@pytest.mark.integration
def test_check_rejects_a_bad_expected_peers_value():
    result = run_check("--neighbor.expected-peers", "many")
    assert result.returncode == 2
    assert "--neighbor.expected-peers" in result.stderr


def host_entries():
    """Host-wide entries per family from /proc/net/stat (the entries column is global)."""
    return {family: proc_stat(family)["entries"] for family in ("ipv4", "ipv6")}


@pytest.mark.integration
def test_exporter_inside_a_namespace_subtracts_that_namespaces_exempt_entries(tmp_path, netns):
    """The process as a pod runs it: started in a namespace, scraped over its loopback.
    Its GC-eligible bound is the host's entries less the exempt entries of its namespace,
    compared in a scrape during which the global table held still."""
    netns.batch(
        neighbor_adds(12, "ipv4", "stale")
        + neighbor_adds(5, "ipv4", "permanent", start=50)
        + neighbor_adds(3, "ipv6", "permanent")
    )
    # Not start_exporter: the port is in the namespace, so it is waited on from there.
    port = free_port()
    proc = Proc(
        ["ip", "netns", "exec", netns.name, *exporter_argv(port)],
        tmp_path / "exporter.log",
        cwd=REPO,
    )
    try:
        netns.run(wait_for_port, port, "127.0.0.1", 30.0, proc)
        for _ in range(20):
            before = host_entries()
            text = netns.run(
                lambda: requests.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text
            )
            families = parse_exposition(text)
            entries = {f: sample(families, "kubescale_neighbor_entries", family=f) for f in before}
            if before == host_entries() == entries:
                break
        else:
            raise AssertionError(f"the global table never held still: {before} {entries}")
    finally:
        proc.stop()
    # Talking over loopback adds a NOARP entry on lo: GC-eligible, so not subtracted.
    listed = json.loads(netns.ip("-j", "neigh", "show", "nud", "all").stdout)
    assert [e["state"] for e in listed if e["dev"] == "lo"] == [["NOARP"]]
    assert (
        sample(families, "kubescale_neighbor_gc_eligible_entries", family="ipv4")
        == entries["ipv4"] - 5
    )
    assert (
        sample(families, "kubescale_neighbor_gc_eligible_entries", family="ipv6")
        == entries["ipv6"] - 3
    )
    # /proc/net/stat does not exist outside the host namespace: that series is left out.
    assert not [
        s
        for f in families
        for s in f.samples
        if s.name == "kubescale_neighbor_unresolved_discards_total"
    ]


@pytest.mark.integration
def test_check_outside_the_host_namespace_says_so(netns):
    result = run_check(within=("ip", "netns", "exec", netns.name))
    assert result.returncode == 1, result.stdout + result.stderr
    assert "the exporter is not in the host network namespace" in result.stdout
    assert "hostNetwork: true" in result.stdout
