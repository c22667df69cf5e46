"""Fixtures of the Kubernetes API layer's tests; the API server itself (`apiserver`,
`fresh_apiserver`, `namespace`, `uniq`) comes from tests/conftest.py."""

import pytest

from kube_scale_exporter import kube


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
