"""Service accounts on the test API server, each holding exactly one ClusterRole of its own.

account = service_account(api, "prometheus", rules, directory)
account.name, account.kubeconfig, account.token
token = metrics_reader_token(create, namespace, name)
"""

from __future__ import annotations

import os
import uuid
from typing import NamedTuple

RBAC = "/apis/rbac.authorization.k8s.io/v1"


class Account(NamedTuple):
    name: str  # as the API server's audit log has it, less system:serviceaccount:default:
    kubeconfig: str  # a kubeconfig with its token
    token: str  # from the TokenRequest API, valid for an hour


def service_account(api, name: str, rules: list, directory) -> Account:
    """A new service account in `default` (`name` plus a random suffix) bound to a ClusterRole
    of exactly `rules`; its kubeconfig is written in `directory`."""
    sa = f"{name}-{uuid.uuid4().hex[:6]}"
    api.admin.create("/api/v1/namespaces/default/serviceaccounts", {"metadata": {"name": sa}})
    api.admin.create(f"{RBAC}/clusterroles", {"metadata": {"name": sa}, "rules": rules})
    api.admin.create(
        f"{RBAC}/clusterrolebindings",
        {
            "metadata": {"name": sa},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": sa},
            "subjects": [{"kind": "ServiceAccount", "name": sa, "namespace": "default"}],
        },
    )
    token = api.admin.create(
        f"/api/v1/namespaces/default/serviceaccounts/{sa}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": 3600},
        },
    )["status"]["token"]
    path = os.path.join(str(directory), f"kubeconfig-{sa}")
    return Account(sa, api.write_kubeconfig(path, token=token), token)


def metrics_reader_token(create, namespace: str, name: str, seconds: int = 3600) -> str:
    """A ServiceAccount `name` bound to kube-scale-exporter-metrics-reader, as docs/deploy.md
    tells users to bind Prometheus', and a token of it valid `seconds`. `create(path, body)`
    posts as an admin (a running cluster's or the test API server's client)."""
    create(f"/api/v1/namespaces/{namespace}/serviceaccounts", {"metadata": {"name": name}})
    create(
        f"{RBAC}/clusterrolebindings",
        {
            "metadata": {"name": f"{name}-kube-scale-exporter"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": "kube-scale-exporter-metrics-reader",
            },
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": namespace}],
        },
    )
    return create(
        f"/api/v1/namespaces/{namespace}/serviceaccounts/{name}/token",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenRequest",
            "spec": {"expirationSeconds": seconds},
        },
    )["status"]["token"]
