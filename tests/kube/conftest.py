"""A real etcd + kube-apiserver for the Kubernetes API layer and the balloon collector.

`apiserver` is shared by the session: tests isolate themselves with their own namespace,
label values and cluster-scoped names (`uniq`). Tests that restart the API server or
compact etcd start their own pair with `fresh_apiserver`.
"""
import contextlib
import uuid

import pytest

from kube_scale_exporter import kube
from testbed.kube_apiserver import KubeApiServer, apiserver_on_new_etcd


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
                return stack.enter_context(apiserver_on_new_etcd(workdir,
                                                                 watch_cache=watch_cache))
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

