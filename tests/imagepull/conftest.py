"""Real containerd, a real docker-registry and a throttling proxy between them.

The registry and the proxy are shared by the module (images are pushed with fresh
random layers per test); each test gets its own containerd, so an ingest one test
leaves behind is never seen by another. The API server for the pod watch is the
session's (tests/conftest.py); tests keep to their own namespace.

A test parametrized by `line` runs on each line it names (1.7, 2.3, 2.4); the others run
the default, `containerd` (2.3, or $KSE_CONTAINERD_DIR's). With KSE_CONTAINERD_DIR set
(`make test-containerd-2.4`) the by-line tests are left out: `make test` ran them all.
"""

import os
import shutil
import tempfile
from pathlib import Path

import pytest

from kube_scale_exporter.cli import parse
from kube_scale_exporter.collectors.imagepull import ImagePullCollector
from testbed.containerd_server import ContainerdServer
from testbed.registry_server import RegistryServer
from testbed.throttle_proxy import ThrottleProxy

# 4 MiB/s per connection: a 16 MiB layer takes about 4 s, long enough to watch.
PROXY_RATE = 4 << 20
HERE = Path(__file__).resolve().parent


def pytest_collection_modifyitems(config, items):
    """Every item of the session passes here: only this directory's by-line tests go."""
    if not os.environ.get("KSE_CONTAINERD_DIR"):
        return
    by_line = [
        i
        for i in items
        if HERE in i.path.parents and "line" in getattr(getattr(i, "callspec", None), "params", {})
    ]
    if by_line:
        config.hook.pytest_deselected(items=by_line)
        items[:] = [i for i in items if i not in by_line]


@pytest.fixture(scope="module")
def workdir():
    # Short, so unix socket paths stay under the 108-byte limit.
    path = tempfile.mkdtemp(prefix="ip-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture(scope="module")
def registry(workdir):
    server = RegistryServer(f"{workdir}/registry").start()
    yield server
    server.stop()


@pytest.fixture(scope="module")
def proxy(workdir, registry):
    p = ThrottleProxy(workdir, registry.port, PROXY_RATE)
    yield p
    p.stop()


@pytest.fixture
def containerd():
    path = tempfile.mkdtemp(prefix="cd-", dir="/tmp")
    server = ContainerdServer(path).start()
    yield server
    server.wipe()


def collector_args(*flags):
    args, classes = parse(["--collector.disable-defaults", "--collector.imagepull", *flags])
    assert classes == [ImagePullCollector]
    return args


@pytest.fixture
def make_collector(monkeypatch):
    """make_collector(address, *flags) -> a started ImagePullCollector.

    Without --kube.node-name (NODE_NAME is cleared) it has no pod watch."""
    monkeypatch.delenv("NODE_NAME", raising=False)
    made = []

    def make(address, *flags):
        c = ImagePullCollector(collector_args("--containerd.address", address, *flags))
        c.start()
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()
