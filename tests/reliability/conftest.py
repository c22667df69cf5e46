"""Real components for the fault tests: etcd, containerd, kube-apiserver, the exporter.

Each test gets its own servers (faults stop and pause them) in a short temp dir, so
containerd's socket path stays under the 108-byte limit.
"""
import shutil
import tempfile

import pytest

from tests.helpers.containerd_server import ContainerdServer
from tests.helpers.etcd_server import EtcdServer
from tests.reliability.running import RunningExporter


@pytest.fixture
def workdir():
    path = tempfile.mkdtemp(prefix="rel-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def etcd(workdir):
    server = EtcdServer(f"{workdir}/etcd").start()
    yield server
    server.stop()


@pytest.fixture
def containerd(workdir):
    server = ContainerdServer(f"{workdir}/cd").start()
    yield server
    server.stop()


@pytest.fixture
def run_exporter(workdir):
    """run_exporter(flags, module="exporter") -> a started RunningExporter, stopped after."""
    started = []

    def run(flags, module="exporter"):
        exporter = RunningExporter(flags, workdir, module=module).start()
        started.append(exporter)
        return exporter

    yield run
    for exporter in started:
        exporter.stop()
