"""A real kube-apiserver (built by .ci/setup.d/40-kubernetes.sh) on a free loopback port, on
etcd 3.7 as kubeadm 1.37 runs it. The release is 1.37, or the one $KSE_KUBE_RELEASE names
(1.35, the oldest upstream supports: `make test-kube-1.35` runs the API-level tests on it).

    with apiserver_on_new_etcd(tmp) as api:                     # api.etcd is its etcd
        ...
    # or, to share an etcd:
    api = KubeApiServer(tmp / "api", etcd.client_url).start()
    api.admin.create("/api/v1/namespaces/default/pods", pod)     # admin requests
    api.write_kubeconfig(path, token=api.limited_token)         # for the code under test
    api.stop()

Authentication is a static token file with two users: `admin` (system:masters) and
`limited` (no permissions until a test binds a role to it), plus service-account tokens
signed with a key made by openssl (TokenRequest works). There is no scheduler, controller
manager or kubelet: tests set spec.nodeName themselves and patch /status.
"""

import base64
import contextlib
import os
import secrets
import time

import requests
import yaml
from prometheus_client.parser import text_string_to_metric_families

from .builds import KUBE_RELEASE, KUBE_RELEASES, kube_binary
from .etcd_server import CONTROL_PLANE_VERSION, EtcdServer
from .pki import TestCA, openssl
from .ports import free_port
from .procs import Proc, wait_for_port

LIMITED_USER = "limited"


def release() -> str:
    """The Kubernetes release of the API servers tests start: $KSE_KUBE_RELEASE or 1.37."""
    wanted = os.environ.get("KSE_KUBE_RELEASE", KUBE_RELEASE)
    if wanted not in KUBE_RELEASES:
        raise ValueError(f"KSE_KUBE_RELEASE={wanted}: not one of {', '.join(KUBE_RELEASES)}")
    return wanted


class Api:
    """Plain requests to the test API server as one user (tests' own writes and reads)."""

    def __init__(self, server, ca, token):
        self.server = server
        self.ca = ca
        self.token = token
        self.session = requests.Session()
        self.session.trust_env = False  # REQUESTS_CA_BUNDLE would replace our CA

    def request(
        self,
        method,
        path,
        body=None,
        params=None,
        content_type="application/json",
        ok=(200, 201, 202),
    ):
        headers = {"Authorization": f"Bearer {self.token}", "Content-Type": content_type}
        data = (
            None
            if body is None
            else (body if isinstance(body, (str, bytes)) else requests.compat.json.dumps(body))
        )
        resp = self.session.request(
            method,
            self.server + path,
            data=data,
            params=params,
            headers=headers,
            verify=self.ca,
            timeout=30,
        )
        if resp.status_code not in ok:
            raise AssertionError(f"{method} {path}: {resp.status_code} {resp.text[:500]}")
        return (
            resp.json()
            if resp.content and resp.headers.get("Content-Type", "").startswith("application/json")
            else resp.text
        )

    def get(self, path, **params):
        return self.request("GET", path, params=params or None)

    def create(self, path, obj):
        return self.request("POST", path, obj)

    def merge_patch(self, path, patch):
        return self.request("PATCH", path, patch, content_type="application/merge-patch+json")

    def delete(self, path, grace_seconds=0):
        return self.request("DELETE", path, {"gracePeriodSeconds": grace_seconds})


class KubeApiServer:
    def __init__(self, workdir, etcd_url, watch_cache=True, extra_args=()):
        self.workdir = str(workdir)
        self.etcd_url = etcd_url
        self.watch_cache = watch_cache
        self.extra_args = list(extra_args)
        self.port = free_port()
        self.server = f"https://127.0.0.1:{self.port}"
        self.cert_dir = os.path.join(self.workdir, "certs")
        self.ca = os.path.join(self.cert_dir, "apiserver.crt")
        self.serving_key = os.path.join(self.cert_dir, "apiserver.key")
        self.admin_token = secrets.token_hex(16)
        self.limited_token = secrets.token_hex(16)
        self.sa_key = os.path.join(self.workdir, "sa.key")
        self.client_ca = (
            os.path.join(self.workdir, "client-ca.crt"),
            os.path.join(self.workdir, "client-ca.key"),
        )
        self.admin_cert = (
            os.path.join(self.workdir, "admin.crt"),
            os.path.join(self.workdir, "admin.key"),
        )
        self.proc = None
        self.admin = Api(self.server, self.ca, self.admin_token)

    def _prepare(self):
        os.makedirs(self.cert_dir, exist_ok=True)
        with open(os.path.join(self.workdir, "tokens.csv"), "w", encoding="utf-8") as f:
            f.write(f'{self.admin_token},admin,uid-admin,"system:masters"\n')
            f.write(f"{self.limited_token},{LIMITED_USER},uid-limited\n")
        if not os.path.exists(self.sa_key):
            openssl("genrsa", "-out", self.sa_key, "2048")
        if not os.path.exists(self.client_ca[0]):
            self._make_client_certs()

    def _make_client_certs(self):
        """A client CA and one admin certificate it signed (CN=user, O=group)."""
        ca = TestCA(self.workdir, "client-ca")
        ca.issue("admin", subject="/O=system:masters/CN=cert-admin")

    def argv(self):
        return [
            kube_binary("kube-apiserver", release()),
            "--etcd-servers",
            self.etcd_url,
            "--bind-address",
            "127.0.0.1",
            "--advertise-address",
            "127.0.0.1",
            "--secure-port",
            str(self.port),
            "--cert-dir",
            self.cert_dir,
            "--token-auth-file",
            os.path.join(self.workdir, "tokens.csv"),
            "--client-ca-file",
            self.client_ca[0],
            "--authorization-mode",
            "RBAC",
            "--service-account-issuer",
            "https://kubernetes.default.svc",
            "--service-account-key-file",
            self.sa_key,
            "--service-account-signing-key-file",
            self.sa_key,
            "--api-audiences",
            "https://kubernetes.default.svc",
            "--disable-admission-plugins",
            "ServiceAccount",
            "--endpoint-reconciler-type",
            "none",
            "--service-cluster-ip-range",
            "10.0.0.0/24",
            "--watch-cache=" + ("true" if self.watch_cache else "false"),
            "--profiling=false",
            *self.extra_args,
        ]

    def start(self, timeout=60.0):
        self._prepare()
        self.proc = Proc(self.argv(), os.path.join(self.workdir, "kube-apiserver.log"))
        wait_for_port(self.port, timeout=timeout, proc=self.proc)
        self.wait_ready(timeout)
        return self

    def wait_ready(self, timeout=60.0):
        deadline = time.monotonic() + timeout
        last = ""
        while time.monotonic() < deadline:
            if not self.proc.alive():
                raise RuntimeError(f"kube-apiserver exited:\n{self.proc.log_tail()}")
            try:
                self.admin.request("GET", "/readyz")
                # The default namespace comes from a controller inside the API server.
                self.admin.get("/api/v1/namespaces/default")
                return
            except (AssertionError, requests.RequestException) as e:
                last = str(e)
            time.sleep(0.2)
        raise TimeoutError(f"kube-apiserver not ready: {last}\n{self.proc.log_tail()}")

    def stop(self):
        if self.proc:
            self.proc.stop()
            self.proc = None

    def restart(self):
        """Same port, certificates, tokens and etcd: as after an API server upgrade."""
        self.stop()
        return self.start()

    def user(self, token):
        return Api(self.server, self.ca, token)

    def write_kubeconfig(self, path, token=None, ca_inline=False, client_cert=None, server=None):
        """A kubeconfig for this server (or a proxy in front of it, `server`); the token
        defaults to the admin's."""
        cluster = {"server": server or self.server}
        if ca_inline:
            with open(self.ca, "rb") as f:
                cluster["certificate-authority-data"] = base64.b64encode(f.read()).decode()
        else:
            cluster["certificate-authority"] = self.ca
        user = {"token": token or self.admin_token}
        if client_cert:
            user = {"client-certificate": client_cert[0], "client-key": client_cert[1]}
        doc = {
            "apiVersion": "v1",
            "kind": "Config",
            "current-context": "test",
            "clusters": [{"name": "test", "cluster": cluster}],
            "users": [{"name": "test", "user": user}],
            "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test"}}],
        }
        with open(path, "w", encoding="utf-8") as f:
            yaml.safe_dump(doc, f)
        return str(path)

    def metric_sum(self, name, **labels):
        """Sum of the API server's own /metrics samples `name` matching `labels`."""
        text = self.admin.request("GET", "/metrics")
        total = 0.0
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == name and all(
                    sample.labels.get(k) == v for k, v in labels.items()
                ):
                    total += sample.value
        return total


def pod_manifest(name, node=None, labels=None, requests=None, priority_class=None, **spec):
    """A pause pod; `node` sets spec.nodeName (there is no scheduler). Extended resources
    (nvidia.com/gpu, ...) get limits equal to their requests, as the API requires."""
    requests = requests or {}
    limits = {k: v for k, v in requests.items() if "/" in k}
    body = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "containers": [
                {
                    "name": "pause",
                    "image": "pause:3.9",
                    "resources": {"requests": requests, "limits": limits},
                }
            ],
            **spec,
        },
    }
    if node:
        body["spec"]["nodeName"] = node
    if priority_class:
        body["spec"]["priorityClassName"] = priority_class
    return body


def etcd_compact(etcd_url):
    """Compact etcd up to its current revision (physically), through its JSON gateway.

    With --watch-cache=false the API server's watches read etcd directly, so a watch
    resuming from an older resourceVersion then gets 410 Gone.
    """
    session = requests.Session()
    session.trust_env = False
    head = session.post(
        etcd_url + "/v3/kv/range", json={"key": base64.b64encode(b"/").decode()}, timeout=10
    ).json()
    revision = int(head["header"]["revision"])
    resp = session.post(
        etcd_url + "/v3/kv/compaction",
        json={"revision": str(revision), "physical": True},
        timeout=30,
    )
    resp.raise_for_status()
    return revision


@contextlib.contextmanager
def apiserver_on_new_etcd(workdir, etcd_quota_bytes=None, etcd_version=CONTROL_PLANE_VERSION, **kw):
    """An API server on an etcd of its own (`api.etcd`, of `etcd_version`: testbed/
    etcd_server.py's names); both stopped by PID on exit."""
    workdir = str(workdir)
    etcd = EtcdServer(
        os.path.join(workdir, "etcd"), version=etcd_version, quota_bytes=etcd_quota_bytes
    ).start()
    try:
        api = KubeApiServer(os.path.join(workdir, "apiserver"), etcd.client_url, **kw).start()
        api.etcd = etcd
        try:
            yield api
        finally:
            api.stop()
    finally:
        etcd.stop()
