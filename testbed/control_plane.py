"""The e2e cluster's control plane: certificates and the admin kubeconfig, a 3-member etcd
for the main store and a second etcd for events, kube-apiserver, kube-controller-manager,
kube-scheduler.

Functions that write the files and return the command lines; testbed/cluster.py starts
and stops the processes. Every part listens on the node IP (the bridge address pods can
reach, testbed/node.py), the etcds also on loopback.
"""

import pathlib
import time

import requests
import yaml

from .builds import CONTROL_PLANE_ETCD, etcd_binary
from .node import NODE_IP
from .pki import TestCA, openssl

SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
API_PORT = 6443
# The main store's members: (name, client, peer, metrics port). The first is the one on
# kubeadm's ports (its plain metrics listener 2381 is what the key-less etcd-node reads);
# three members so that losing the leader is a fault the cluster survives.
MAIN_MEMBERS = (
    ("main-0", 2379, 2380, 2381),
    ("main-1", 2386, 2387, 2388),
    ("main-2", 2389, 2390, 2391),
)
ETCD_PORT = MAIN_MEMBERS[0][1]
EVENTS_PORT, EVENTS_PEER_PORT, EVENTS_METRICS_PORT = 2383, 2384, 2385
EVENTS_QUOTA = 8 * 1024 * 1024
PORTS = (
    API_PORT,
    *(port for member in MAIN_MEMBERS for port in member[1:]),
    EVENTS_PORT,
    EVENTS_PEER_PORT,
    EVENTS_METRICS_PORT,
)


def make_pki(pki, token):
    """The cluster's CA and etcd's, as kubeadm lays them out, and `token` as the admin's."""
    ca = TestCA(pki, "ca", cn="kse-e2e-ca")
    ca.issue(
        "apiserver",
        f"subjectAltName=IP:{NODE_IP},IP:{SERVICE_IP},IP:127.0.0.1,"
        "DNS:kubernetes,DNS:kubernetes.default,DNS:kubernetes.default.svc,"
        "DNS:kubernetes.default.svc.cluster.local,DNS:localhost\n"
        "extendedKeyUsage=serverAuth",
    )
    # The API server's client certificate for kubelet calls (logs, exec).
    ca.issue(
        "apiserver-kubelet-client",
        "extendedKeyUsage=clientAuth",
        subject="/O=system:masters/CN=kube-apiserver-kubelet-client",
    )
    openssl("genrsa", "-out", str(pki / "sa.key"), "2048")
    # etcd's own CA, as kubeadm lays it out (the etcd-node DaemonSet reads the
    # healthcheck client pair; the overlay in tests/e2e points it here).
    etcd_dir = pki / "etcd"
    eca = TestCA(etcd_dir, "ca", cn="kse-e2e-etcd-ca")
    eca.issue(
        "server",
        f"subjectAltName=IP:127.0.0.1,IP:{NODE_IP},DNS:localhost\n"
        "extendedKeyUsage=serverAuth,clientAuth",
    )
    eca.issue(
        "apiserver-etcd-client",
        "extendedKeyUsage=clientAuth",
        subject="/O=system:masters/CN=kube-apiserver-etcd-client",
    )
    eca.issue(
        "healthcheck-client",
        "extendedKeyUsage=clientAuth",
        subject="/O=system:masters/CN=kube-etcd-healthcheck-client",
    )
    for key in etcd_dir.glob("*.key"):
        key.chmod(0o600)
    (pki / "tokens.csv").write_text(f'{token},admin,uid-admin,"system:masters"\n')


def kubeconfig(path, server, ca, token, name="e2e"):
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": name,
        "clusters": [
            {"name": name, "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [{"name": name, "user": {"token": token}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": name}}],
    }
    pathlib.Path(path).write_text(yaml.safe_dump(doc))
    return str(path)


def etcd_argv(name, data, etcd_pki, port, peer, metrics, quota=None, tls=True, peers=None):
    """One member; `peers` is the initial cluster (name=peer URL,...), default itself alone."""
    scheme = "https" if tls else "http"
    listen = f"{scheme}://127.0.0.1:{port},{scheme}://{NODE_IP}:{port}"
    argv = [
        etcd_binary(CONTROL_PLANE_ETCD),
        "--name",
        name,
        "--data-dir",
        str(data),
        "--listen-client-urls",
        listen,
        "--advertise-client-urls",
        f"{scheme}://{NODE_IP}:{port}",
        "--listen-peer-urls",
        f"http://127.0.0.1:{peer}",
        "--initial-advertise-peer-urls",
        f"http://127.0.0.1:{peer}",
        "--initial-cluster",
        peers or f"{name}=http://127.0.0.1:{peer}",
        "--initial-cluster-token",
        f"kse-e2e-{name.split('-')[0]}",
        "--listen-metrics-urls",
        f"http://127.0.0.1:{metrics}",
    ]
    if quota:
        argv += ["--quota-backend-bytes", str(quota)]
    if tls:
        argv += [
            "--cert-file",
            str(etcd_pki / "server.crt"),
            "--key-file",
            str(etcd_pki / "server.key"),
            "--trusted-ca-file",
            str(etcd_pki / "ca.crt"),
            "--client-cert-auth",
        ]
    return argv


def main_etcd_urls() -> str:
    """The main store's client URLs, as the API server's --etcd-servers takes them."""
    return ",".join(f"https://127.0.0.1:{client}" for _, client, _, _ in MAIN_MEMBERS)


def etcds(work, etcd_pki, events_quota=EVENTS_QUOTA):
    """(name, client port, argv) of each member, in the order they start: main's three over
    TLS, events in plain HTTP with a small quota (the e2e fills it to NOSPACE)."""
    peers = ",".join(f"{name}=http://127.0.0.1:{peer}" for name, _, peer, _ in MAIN_MEMBERS)
    return [
        *(
            (
                name,
                client,
                etcd_argv(
                    name, work / f"etcd-{name}", etcd_pki, client, peer, metrics, peers=peers
                ),
            )
            for name, client, peer, metrics in MAIN_MEMBERS
        ),
        (
            "events",
            EVENTS_PORT,
            etcd_argv(
                "events",
                work / "etcd-events",
                etcd_pki,
                EVENTS_PORT,
                EVENTS_PEER_PORT,
                EVENTS_METRICS_PORT,
                quota=events_quota,
                tls=False,
            ),
        ),
    ]


def apiserver_argv(binary, pki, cert_dir):
    p, e = pki, pki / "etcd"
    return [
        binary,
        "--etcd-servers",
        main_etcd_urls(),
        "--etcd-cafile",
        str(e / "ca.crt"),
        "--etcd-certfile",
        str(e / "apiserver-etcd-client.crt"),
        "--etcd-keyfile",
        str(e / "apiserver-etcd-client.key"),
        "--etcd-servers-overrides",
        f"/events#http://{NODE_IP}:{EVENTS_PORT}",
        "--bind-address",
        NODE_IP,
        "--advertise-address",
        NODE_IP,
        "--secure-port",
        str(API_PORT),
        "--cert-dir",
        str(cert_dir),
        "--tls-cert-file",
        str(p / "apiserver.crt"),
        "--tls-private-key-file",
        str(p / "apiserver.key"),
        "--client-ca-file",
        str(p / "ca.crt"),
        "--token-auth-file",
        str(p / "tokens.csv"),
        "--authorization-mode",
        "Node,RBAC",
        "--service-account-issuer",
        "https://kubernetes.default.svc",
        "--service-account-key-file",
        str(p / "sa.key"),
        "--service-account-signing-key-file",
        str(p / "sa.key"),
        "--api-audiences",
        "https://kubernetes.default.svc",
        "--service-cluster-ip-range",
        SERVICE_CIDR,
        "--allow-privileged=true",
        "--profiling=false",
        "--kubelet-preferred-address-types",
        "InternalIP",
        "--kubelet-client-certificate",
        str(p / "apiserver-kubelet-client.crt"),
        "--kubelet-client-key",
        str(p / "apiserver-kubelet-client.key"),
    ]


def wait_apiserver(session, server, proc, timeout=60):
    """Until it is ready and serves the default namespace (the store answers)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if (
                session.get(server + "/readyz", timeout=5).ok
                and session.get(server + "/api/v1/namespaces/default", timeout=5).ok
            ):
                return
        except requests.RequestException:
            pass
        if not proc.alive():
            raise RuntimeError(f"kube-apiserver exited:\n{proc.log_tail()}")
        time.sleep(0.3)
    raise TimeoutError(f"kube-apiserver not ready:\n{proc.log_tail()}")


def _component_argv(binary, kubeconfig):
    """What the controller-manager and the scheduler share: the admin kubeconfig for
    everything, no leader election, no serving ports, no profiling."""
    kc = str(kubeconfig)
    return [
        binary,
        "--kubeconfig",
        kc,
        "--authentication-kubeconfig",
        kc,
        "--authorization-kubeconfig",
        kc,
        "--leader-elect=false",
        "--secure-port=0",
        "--profiling=false",
    ]


def controller_manager_argv(binary, kubeconfig, pki):
    return [
        *_component_argv(binary, kubeconfig),
        "--service-account-private-key-file",
        str(pki / "sa.key"),
        "--root-ca-file",
        str(pki / "ca.crt"),
        "--cluster-signing-cert-file",
        str(pki / "ca.crt"),
        "--cluster-signing-key-file",
        str(pki / "ca.key"),
        "--use-service-account-credentials=false",
        "--node-monitor-grace-period=40s",
    ]


def scheduler_argv(binary, kubeconfig):
    return _component_argv(binary, kubeconfig)


def wait_service_accounts(session, server, timeout=60):
    """Until the controller-manager has made the default ServiceAccount (pods get their
    tokens from the TokenRequest API: no token Secrets since 1.24)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        sa = session.get(f"{server}/api/v1/namespaces/default/serviceaccounts/default", timeout=5)
        if sa.ok:
            return
        time.sleep(0.3)
    raise TimeoutError("no default ServiceAccount (controller-manager?)")
