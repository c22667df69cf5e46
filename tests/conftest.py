"""Shared by every test area; each area keeps its own fixtures in tests/AREA/conftest.py.

Tiers: every test carries exactly one of the markers `unit`, `integration` and `e2e`
(pyproject.toml says what each means; docs/development.md how to run each), set by its
module's `pytestmark` or, in a module that holds both, on each test; tests/e2e is e2e as a
whole, set here. Collection fails naming every test with none or more than one, and a unit
test that starts a process fails: `make test-unit` must stay runnable without root or
binaries.

`scripted`: collectors with controllable behaviour, to drive the scrape machinery (the
scraper, check and the HTTP server) without any backend.

The Kubernetes API fixtures are here because tests/kube, tests/balloon, tests/imagepull
and tests/imagepull_events all use them: one etcd + kube-apiserver pair per session
(started on first use) instead of one per area. Tests isolate themselves with their own
namespace, label values and cluster-scoped names (`uniq`); tests that restart the API
server or compact etcd start their own pair with `fresh_apiserver`.
"""

import contextlib
import os
import subprocess
import threading
import uuid
from pathlib import Path

import pytest

from kube_scale_exporter.metrics import GaugeFamily
from kube_scale_exporter.registry import Collector
from testbed import builds, containerd_server, etcd_server, kube_apiserver, prometheus
from testbed.accounts import service_account
from testbed.kube_apiserver import KubeApiServer, apiserver_on_new_etcd

# tests/e2e brings up a real cluster on this host (root, minutes, host changes undone at the
# end): only `make e2e` (KSE_E2E=1) collects it, never the main suite.
collect_ignore = [] if os.environ.get("KSE_E2E") == "1" else ["e2e"]
# Thanos is built by .ci/bench.d (by hand, as the benches' peers): only `make test-thanos`
# (KSE_THANOS=1) collects its live test.
if os.environ.get("KSE_THANOS") != "1":
    collect_ignore.append("mixin/test_thanos_live.py")
E2E_DIR = Path(__file__).resolve().parent / "e2e"
TIERS = ("unit", "integration", "e2e")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects: every collected test is checked
def pytest_collection_modifyitems(config, items):
    wrong = []
    for item in items:
        if E2E_DIR in item.path.parents:
            item.add_marker(pytest.mark.e2e)
        tiers = [m.name for m in item.iter_markers() if m.name in TIERS]
        if len(tiers) != 1:
            wrong.append(f"{item.nodeid}: {', '.join(tiers) or 'no tier'}")
    if wrong:
        raise pytest.UsageError(
            "each test needs exactly one of the markers "
            + ", ".join(TIERS)
            + ":\n  "
            + "\n  ".join(wrong)
        )


@pytest.fixture(autouse=True)
def _unit_tests_start_no_process(request, monkeypatch):
    """A unit test runs in this process: no binary, no exporter process, no helper."""
    if request.node.get_closest_marker("unit") is None:
        return

    def refuse(self, args, *rest, **kwargs):
        raise AssertionError(f"a unit test starts no process ({args!r}): mark it integration")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)


def pytest_report_header(config):
    """The versions this run's real components are, as each binary reports itself."""
    lines = []
    for what, find, *ask in (
        *(
            (f"kubernetes {r}", lambda r=r: builds.kube_binary("kube-apiserver", r))
            for r in builds.KUBE_RELEASES
        ),
        ("kwok", builds.kwok_binary),
        ("helm", builds.helm_binary, "version", "--short"),
        ("kubeconform", builds.kubeconform_binary, "-v"),
        *((f"etcd {v}", lambda v=v: etcd_server.etcd_binary(v)) for v in etcd_server.VERSIONS),
        *(
            (f"containerd {v}", lambda v=v: containerd_server.binary(v))
            for v in containerd_server.VERSIONS
        ),
        # The registry-mirror matrix's: containerd 2.1 and crictl (tests/imagepull/test_mirrors.py).
        ("containerd 2.1", lambda: containerd_server.binary("2.1")),
        ("crictl", builds.crictl_binary),
        *(
            (f"{name} {r}", lambda r=r, name=name: prometheus.binary(r, name))
            for r in prometheus.RELEASES
            for name in prometheus.NAMES
        ),
        ("thanos", builds.thanos_binary),
    ):
        try:
            lines.append(f"{what}: {builds.version_line(find(), *ask)}")
        except (FileNotFoundError, ImportError) as e:
            lines.append(f"{what}: not installed ({e})")
    try:  # Spegel has no --version: the tarball it was built from
        builds.spegel_binary()
        lines.append(f"spegel: {builds.third_party_version('spegel')} (its source tarball)")
    except FileNotFoundError as e:
        lines.append(f"spegel: not installed ({e})")
    lines.append(f"API servers started by tests: Kubernetes {kube_apiserver.release()}")
    try:
        logged = builds.cluster_autoscaler_logged_version(builds.cluster_autoscaler_binary())
        lines.append(f"cluster-autoscaler: {logged} (kwok provider)")
    except FileNotFoundError as e:
        lines.append(f"cluster-autoscaler: not installed ({e})")
    return lines


class Scripted(Collector):
    """A collector whose next scrape does what the test says: return, raise or hang."""

    def __init__(self, name, value=1.0, findings=()):
        self.name = name
        self.value = value
        self.error = None
        self.hang = threading.Event()  # set: collect blocks until `release` is set
        self.release = threading.Event()
        self.calls = 0
        self._findings = list(findings)

    def observe(self):
        self.calls += 1
        if self.hang.is_set():
            self.release.wait(30)
        if self.error:
            raise self.error
        return (self.name, self.value, self._findings)

    @staticmethod
    def families(state):
        name, value, _ = state
        g = GaugeFamily(f"kubescale_test_{name}", "A test value.")
        g.add_metric([], value)
        return [g]

    @staticmethod
    def advise(state):
        return state[2]


@pytest.fixture
def scripted():
    made = []

    def make(name, **kw):
        c = Scripted(name, **kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.release.set()


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory):
    with apiserver_on_new_etcd(tmp_path_factory.mktemp("kube")) as api:
        yield api


@pytest.fixture
def fresh_apiserver(tmp_path):
    """Start-your-own: `fresh_apiserver(watch_cache=False)`, or a second API server on the
    same etcd with `fresh_apiserver(etcd=first.etcd)`; all stopped after the test."""
    count = iter(range(100))
    with contextlib.ExitStack() as stack:

        def start(watch_cache=True, etcd=None):
            workdir = tmp_path / f"api{next(count)}"
            if etcd is None:
                return stack.enter_context(apiserver_on_new_etcd(workdir, watch_cache=watch_cache))
            api = KubeApiServer(workdir, etcd.client_url, watch_cache=watch_cache).start()
            stack.callback(api.stop)
            api.etcd = etcd
            return api

        yield start


@pytest.fixture
def uniq():
    return "t" + uuid.uuid4().hex[:8]


@pytest.fixture
def namespace(apiserver, uniq):
    apiserver.admin.create("/api/v1/namespaces", {"metadata": {"name": uniq}})
    return uniq


@pytest.fixture
def kubeconfig_for(apiserver, tmp_path):
    """kubeconfig_for(name, rules): a kubeconfig for a new service account that holds a
    ClusterRole of exactly `rules` and nothing else (its token from the TokenRequest API)."""

    def make(name, rules):
        return service_account(apiserver, name, rules, tmp_path).kubeconfig

    return make
