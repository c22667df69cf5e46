"""A real etcd + kube-apiserver for the Kubernetes API layer and the balloon collector.

`apiserver` is shared by the session: tests isolate themselves with their own namespace,
label values and cluster-scoped names (`uniq`). Tests that restart the API server or
compact etcd start their own pair with `fresh_apiserver`.
"""
import uuid

import pytest

from exporter import kube
from tests.helpers.etcd_server import EtcdServer
from tests.helpers.kube_apiserver import KubeApiServer


def _start_pair(workdir, watch_cache=True, etcd=None):
    """An API server, on its own new etcd or on `etcd` (then it is not stopped with it)."""
    own = etcd is None
    if own:
        etcd = EtcdServer(workdir / "etcd").start()
    try:
        api = KubeApiServer(workdir / "apiserver", etcd.client_url,
                            watch_cache=watch_cache).start()
    except BaseException:
        if own:
            etcd.stop()
        raise
    api.etcd = etcd
    api.owns_etcd = own
    return api


def _stop_pair(api):
    api.stop()
    if api.owns_etcd:
        api.etcd.stop()


@pytest.fixture(scope="session")
def apiserver(tmp_path_factory):
    api = _start_pair(tmp_path_factory.mktemp("kube"))
    yield api
    _stop_pair(api)


@pytest.fixture
def fresh_apiserver(tmp_path):
    """Start-your-own: `fresh_apiserver(watch_cache=False)`, or a second API server on the
    same etcd with `fresh_apiserver(etcd=first.etcd)`; all stopped after the test."""
    started = []

    def start(watch_cache=True, etcd=None):
        api = _start_pair(tmp_path / f"pair{len(started)}", watch_cache=watch_cache, etcd=etcd)
        started.append(api)
        return api

    yield start
    for api in reversed(started):
        _stop_pair(api)


@pytest.fixture
def uniq():
    return "t" + uuid.uuid4().hex[:8]


@pytest.fixture
def namespace(apiserver, uniq):
    apiserver.admin.create("/api/v1/namespaces", {"metadata": {"name": uniq}})
    return uniq


@pytest.fixture
def make_client(tmp_path):
    """kube clients from a kubeconfig written for (server, token); closed after the test."""
    made = []

    def make(api, token=None, **kw):
        path = api.write_kubeconfig(tmp_path / f"kubeconfig{len(made)}", token=token, **kw)
        client = kube.KubeClient(kube.load(path))
        made.append(client)
        return client

    yield make
    for client in made:
        client.close()
        client.config.close()


@pytest.fixture
def informers():
    """Track informers so each is stopped even when the test fails."""
    started = []

    def track(informer):
        started.append(informer)
        return informer.start()

    yield track
    for informer in started:
        informer.stop()

