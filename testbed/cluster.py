"""A real single-node Kubernetes 1.20 cluster on this host, and a teardown that leaves it clean.

    python -m testbed.cluster up        start it (about a minute from cached binaries)
    python -m testbed.cluster down      stop it and restore the host; exit 1 if anything remains
    python -m testbed.cluster check     compare the host with the snapshot taken before `up`
    python -m testbed.cluster env       KUBECONFIG=... for a shell

Parts: etcd 3.4 (Debian) for the main store over TLS on 127.0.0.1:2379 and the bridge
address, a second etcd for events (`--etcd-servers-overrides=/events#...`, small quota),
kube-apiserver, kube-controller-manager, kube-scheduler, kubelet and kube-proxy built from
Debian bookworm's `kubernetes` source (.ci/setup.d/40-kube-apiserver.sh, 41-kube-node.sh),
Debian's containerd 1.6 with the CRI plugin (kubelet 1.20 speaks CRI v1alpha2, which
containerd 2 removed), CNI bridge + host-local from containernetworking-plugins.

What it takes here (docs/deploy.md "Tested end to end" has the long version):
- root lacks CAP_SYS_RESOURCE, so runc cannot set oom_score_adj below ours: containerd's
  CRI runs with restrict_oom_score_adj, kubelet and kube-proxy with --oom-score-adj 0;
- no registry.k8s.io: the sandbox image is the source tree's pause.c built static;
- pods cannot use an API server on loopback, so the bridge `kse0` gets 10.217.0.1/16 and
  that is the node IP, the API server's address and the pods' gateway;
- cgroupfs driver (no systemd here);
- the kubelet and kube-proxy change sysctls, iptables, cgroups, mounts and files under
  /var/lib/kubelet and /var/log: `up` snapshots the host first, `down` restores it and
  `check` (also run by `down`) lists whatever differs.

Standard paths are used where the product's manifests expect them: the DaemonSet mounts
/run/containerd/containerd.sock and /var/lib/kubelet/config.yaml from the host.
Everything else lives under WORK. The state (PIDs, ports, snapshot) is WORK/state.json,
so `down` works from another process than `up`.
"""

import json
import os
import pathlib
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import time

import requests
import yaml

from . import host
from .host import (
    BRIDGE,
    CNI_BIN,
    CNI_CONF,
    CNI_CONF_DIR,
    CONTAINERD_SOCK,
    CONTAINERD_STATE,
    KUBELET_DIR,
    WORK,
    run,
)
from .pki import TestCA, openssl
from .procs import Proc, wait_for_port

CACHE = pathlib.Path(os.environ.get("KSE_CACHE", "/var/cache/kube-scale-exporter"))
BIN = pathlib.Path(os.environ.get("KUBE_NODE_DIR", str(CACHE)))

NODE_NAME = "kse-e2e-node"
NODE_IP = "10.217.0.1"
POD_CIDR = "10.217.0.0/16"
SERVICE_CIDR = "10.96.0.0/16"
SERVICE_IP = "10.96.0.1"
API_PORT = 6443
ETCD_PORT, ETCD_PEER_PORT = 2379, 2380
# kubeadm's plain metrics listener of the main member, which the key-less etcd-node reads.
ETCD_METRICS_PORT = 2381
EVENTS_PORT, EVENTS_PEER_PORT, EVENTS_METRICS_PORT = 2383, 2384, 2385
EVENTS_QUOTA = 8 * 1024 * 1024
PAUSE_IMAGE = "k8s.gcr.io/pause:3.2"


def _listenable(port: int) -> bool:
    """Nothing listens on the port (with SO_REUSEADDR, as Go's listeners bind: connections
    of the previous run in TIME_WAIT do not count)."""
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(("0.0.0.0", port))
            return True
        except OSError:
            return False


def current_kubectl() -> str:
    """A kubectl that renders current kustomize (v5): $KUSTOMIZE_KUBECTL, sid's kubectl
    unpacked by .ci/setup.d/45-deploy.sh, or the one on PATH."""
    for candidate in (
        os.environ.get("KUSTOMIZE_KUBECTL"),
        str(CACHE / "kubectl-sid/usr/bin/kubectl"),
        shutil.which("kubectl"),
    ):
        if candidate and os.access(candidate, os.X_OK):
            return candidate
    raise FileNotFoundError("no kubectl with kustomize v5: set KUSTOMIZE_KUBECTL")


def binary(name: str) -> str:
    path = BIN / name
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{path} missing: run .ci/setup.d/41-kube-node.sh")
    return str(path)


# ---------------------------------------------------------------- configuration files

CONTAINERD_CONFIG = """\
version = 2
root = "{work}/containerd"
state = "{state}"
oom_score = 0
[grpc]
  address = "{sock}"
[ttrpc]
  address = "{sock}.ttrpc"
[debug]
  address = "{state}/debug.sock"
  level = "info"
[plugins."io.containerd.internal.v1.opt"]
  path = "{work}/opt"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{pause}"
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".containerd]
    snapshotter = "overlayfs"
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
        SystemdCgroup = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "{cni_bin}"
    conf_dir = "{cni_conf}"
  [plugins."io.containerd.grpc.v1.cri".registry]
    config_path = "{work}/certs.d"
"""


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


class Cluster:
    """The cluster's parts and their state; `up()` and `down()` (also from a fresh object)."""

    def __init__(self, work=WORK):
        self.work = pathlib.Path(work)
        self.pki = self.work / "pki"
        self.logs = self.work / "logs"
        self.state_file = self.work / "state.json"
        self.kubeconfig = self.work / "admin.kubeconfig"
        self.server = f"https://{NODE_IP}:{API_PORT}"
        self.state = {}
        self.procs = {}
        self.timings = {}

    # ------------------------------------------------------------ state
    def load(self):
        if self.state_file.exists():
            self.state = json.loads(self.state_file.read_text())
        return self.state

    def save(self):
        self.state_file.write_text(json.dumps(self.state, indent=1))

    @property
    def admin_token(self):
        return self.state["token"]

    def session(self):
        s = requests.Session()
        s.trust_env = False
        s.verify = str(self.pki / "ca.crt")
        s.headers["Authorization"] = f"Bearer {self.admin_token}"
        return s

    def env(self):
        return dict(os.environ, KUBECONFIG=str(self.kubeconfig))

    def kubectl(self, *args, input=None, check=True, kubectl=None):
        """kubectl (default: a current one, kustomize v5) against this cluster."""
        res = subprocess.run(
            [kubectl or current_kubectl(), "--kubeconfig", str(self.kubeconfig), *args],
            input=input,
            text=True,
            capture_output=True,
            check=False,
        )
        if check and res.returncode:
            raise RuntimeError(
                f"kubectl {' '.join(args)}: {res.returncode}\n{res.stdout}\n{res.stderr}"
            )
        return res.stdout

    def ctr(self, *args, check=True):
        return run("ctr", "--address", str(CONTAINERD_SOCK), "-n", "k8s.io", *args, check=check)

    # ------------------------------------------------------------ up
    def up(self, images=()):
        """Start everything; `images` are docker-archive tarballs to import into containerd."""
        t0 = time.monotonic()
        if self.load() or pathlib.Path(f"/sys/class/net/{BRIDGE}").exists() or KUBELET_DIR.exists():
            print("cluster: leftovers of an earlier run; cleaning them first", file=sys.stderr)
            self.down(verify=False)
        for port in (
            API_PORT,
            ETCD_PORT,
            ETCD_PEER_PORT,
            ETCD_METRICS_PORT,
            EVENTS_PORT,
            EVENTS_PEER_PORT,
            EVENTS_METRICS_PORT,
        ):
            if not _listenable(port):
                raise RuntimeError(f"port {port} is taken; the e2e cluster needs it")
        for name in (
            "kube-apiserver",
            "kubelet",
            "kube-proxy",
            "kube-scheduler",
            "kube-controller-manager",
            "pause",
        ):
            binary(name)
        self.state = {
            "snapshot": host.snapshot(),
            "pids": {},
            "token": secrets.token_hex(16),
            "started": time.time(),
        }
        self.work.mkdir(parents=True)
        self.logs.mkdir()
        self.save()
        try:
            self._network()
            self._pki()
            self._etcds()
            self._apiserver()
            self._control_plane()
            self._containerd(images)
            self._kubelet()
            self._kube_proxy()
            self.wait_node_ready()
            self.wait_service_accounts()
        except BaseException:
            print(f"cluster: up failed; logs in {self.logs}", file=sys.stderr)
            raise
        self.timings["up"] = time.monotonic() - t0
        self.state["up_seconds"] = round(self.timings["up"], 1)
        self.save()
        return self

    def _start(self, name, argv, env=None):
        proc = Proc(argv, self.logs / f"{name}.log", env=env)
        self.procs[name] = proc
        self.state["pids"][name] = proc.pid
        self.save()
        return proc

    def _network(self):
        run("ip", "link", "add", BRIDGE, "type", "bridge")
        run("ip", "addr", "add", f"{NODE_IP}/16", "dev", BRIDGE)
        run("ip", "link", "set", BRIDGE, "up")
        CNI_CONF_DIR.mkdir(parents=True, exist_ok=True)
        CNI_CONF.write_text(
            json.dumps(
                {
                    "cniVersion": "0.4.0",
                    "name": "kse-e2e",
                    "plugins": [
                        {
                            "type": "bridge",
                            "bridge": BRIDGE,
                            "isGateway": True,
                            "isDefaultGateway": True,
                            "ipMasq": False,
                            "hairpinMode": True,
                            "ipam": {
                                "type": "host-local",
                                "dataDir": str(self.work / "cni-ipam"),
                                "ranges": [
                                    [
                                        {
                                            "subnet": POD_CIDR,
                                            "rangeStart": "10.217.1.1",
                                            "rangeEnd": "10.217.255.254",
                                            "gateway": NODE_IP,
                                        }
                                    ]
                                ],
                            },
                        }
                    ],
                },
                indent=1,
            )
        )

    def _pki(self):
        ca = TestCA(self.pki, "ca", cn="kse-e2e-ca")
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
        openssl("genrsa", "-out", str(self.pki / "sa.key"), "2048")
        # etcd's own CA, as kubeadm lays it out (the etcd-node DaemonSet reads the
        # healthcheck client pair; the overlay in tests/e2e points it here).
        etcd_dir = self.pki / "etcd"
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
        token = self.admin_token
        (self.pki / "tokens.csv").write_text(f'{token},admin,uid-admin,"system:masters"\n')
        kubeconfig(self.kubeconfig, self.server, self.pki / "ca.crt", token)

    def _etcd(self, name, port, peer, metrics, quota=None, tls=True):
        data = self.work / f"etcd-{name}"
        scheme = "https" if tls else "http"
        listen = f"{scheme}://127.0.0.1:{port},{scheme}://{NODE_IP}:{port}"
        argv = [
            "/usr/bin/etcd",
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
            f"{name}=http://127.0.0.1:{peer}",
            "--initial-cluster-token",
            f"kse-e2e-{name}",
            "--listen-metrics-urls",
            f"http://127.0.0.1:{metrics}",
        ]
        if quota:
            argv += ["--quota-backend-bytes", str(quota)]
        if tls:
            d = self.pki / "etcd"
            argv += [
                "--cert-file",
                str(d / "server.crt"),
                "--key-file",
                str(d / "server.key"),
                "--trusted-ca-file",
                str(d / "ca.crt"),
                "--client-cert-auth",
            ]
        proc = self._start(f"etcd-{name}", argv)
        wait_for_port(port, proc=proc, timeout=30)
        return proc

    def _etcds(self):
        self._etcd("main", ETCD_PORT, ETCD_PEER_PORT, ETCD_METRICS_PORT)
        self._etcd(
            "events",
            EVENTS_PORT,
            EVENTS_PEER_PORT,
            EVENTS_METRICS_PORT,
            quota=EVENTS_QUOTA,
            tls=False,
        )

    def _apiserver(self):
        p, e = self.pki, self.pki / "etcd"
        argv = [
            binary("kube-apiserver"),
            "--etcd-servers",
            f"https://127.0.0.1:{ETCD_PORT}",
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
            "--insecure-port",
            "0",
            "--cert-dir",
            str(self.work / "apiserver-certs"),
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
        proc = self._start("kube-apiserver", argv)
        wait_for_port(API_PORT, host=NODE_IP, proc=proc, timeout=60)
        s = self.session()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if (
                    s.get(self.server + "/readyz", timeout=5).ok
                    and s.get(self.server + "/api/v1/namespaces/default", timeout=5).ok
                ):
                    return
            except requests.RequestException:
                pass
            if not proc.alive():
                raise RuntimeError(f"kube-apiserver exited:\n{proc.log_tail()}")
            time.sleep(0.3)
        raise TimeoutError(f"kube-apiserver not ready:\n{proc.log_tail()}")

    def _control_plane(self):
        kc = str(self.kubeconfig)
        self._start(
            "kube-controller-manager",
            [
                binary("kube-controller-manager"),
                "--kubeconfig",
                kc,
                "--authentication-kubeconfig",
                kc,
                "--authorization-kubeconfig",
                kc,
                "--service-account-private-key-file",
                str(self.pki / "sa.key"),
                "--root-ca-file",
                str(self.pki / "ca.crt"),
                "--cluster-signing-cert-file",
                str(self.pki / "ca.crt"),
                "--cluster-signing-key-file",
                str(self.pki / "ca.key"),
                "--leader-elect=false",
                "--port=0",
                "--secure-port=0",
                "--use-service-account-credentials=false",
                "--profiling=false",
                "--node-monitor-grace-period=40s",
            ],
        )
        self._start(
            "kube-scheduler",
            [
                binary("kube-scheduler"),
                "--kubeconfig",
                kc,
                "--authentication-kubeconfig",
                kc,
                "--authorization-kubeconfig",
                kc,
                "--leader-elect=false",
                "--port=0",
                "--secure-port=0",
                "--profiling=false",
            ],
        )

    def _containerd(self, images):
        config = self.work / "containerd.toml"
        config.write_text(
            CONTAINERD_CONFIG.format(
                work=self.work,
                state=CONTAINERD_STATE,
                sock=CONTAINERD_SOCK,
                pause=PAUSE_IMAGE,
                cni_bin=CNI_BIN,
                cni_conf=CNI_CONF_DIR,
            )
        )
        (self.work / "certs.d").mkdir()
        proc = self._start("containerd", ["/usr/bin/containerd", "--config", str(config)])
        deadline = time.monotonic() + 30
        while not CONTAINERD_SOCK.exists() or self.ctr("version", check=False).returncode:
            if not proc.alive() or time.monotonic() > deadline:
                raise RuntimeError(f"containerd did not start:\n{proc.log_tail()}")
            time.sleep(0.1)
        from . import image  # noqa: PLC0415  (buildah and mmdebstrap only when the image is built)

        t = time.monotonic()
        for archive in (image.pause_archive(binary("pause"), PAUSE_IMAGE), *images):
            self.import_image(archive)
        self.timings["images"] = time.monotonic() - t

    def import_image(self, archive):
        self.ctr("images", "import", str(archive))

    def add_registry(self, host, endpoint):
        """Let the CRI pull from a plain-HTTP registry (containerd reads hosts.toml per pull)."""
        d = self.work / "certs.d" / host
        d.mkdir(parents=True, exist_ok=True)
        (d / "hosts.toml").write_text(
            f'server = "{endpoint}"\n[host."{endpoint}"]\n  capabilities = ["pull", "resolve"]\n'
        )

    def kubelet_config(self, **overrides):
        cfg = {
            "apiVersion": "kubelet.config.k8s.io/v1beta1",
            "kind": "KubeletConfiguration",
            "address": NODE_IP,
            "port": 10250,
            "readOnlyPort": 0,
            "healthzPort": 0,
            "authentication": {
                "anonymous": {"enabled": False},
                "webhook": {"enabled": True},
                "x509": {"clientCAFile": str(self.pki / "ca.crt")},
            },
            "authorization": {"mode": "Webhook"},
            "cgroupDriver": "cgroupfs",
            "failSwapOn": False,
            "serializeImagePulls": True,
            "registryPullQPS": 0,
            "clusterDomain": "cluster.local",
            "resolvConf": "/etc/resolv.conf",
            "imageGCHighThresholdPercent": 100,
            "imageGCLowThresholdPercent": 99,
            "evictionHard": {
                "memory.available": "100Mi",
                "nodefs.available": "2%",
                "imagefs.available": "2%",
            },
            "maxPods": 110,
            "syncFrequency": "10s",
            "fileCheckFrequency": "10s",
            "nodeStatusUpdateFrequency": "5s",
        }
        cfg.update(overrides)
        return cfg

    def _kubelet(self):
        KUBELET_DIR.mkdir(parents=True, exist_ok=True)
        (KUBELET_DIR / "config.yaml").write_text(yaml.safe_dump(self.kubelet_config()))
        self._start(
            "kubelet",
            [
                binary("kubelet"),
                "--config",
                str(KUBELET_DIR / "config.yaml"),
                "--kubeconfig",
                str(self.kubeconfig),
                "--root-dir",
                str(KUBELET_DIR),
                "--container-runtime=remote",
                f"--container-runtime-endpoint=unix://{CONTAINERD_SOCK}",
                f"--node-ip={NODE_IP}",
                f"--hostname-override={NODE_NAME}",
                "--oom-score-adj=0",
                "--cert-dir",
                str(KUBELET_DIR / "pki"),
                "--v=1",
            ],
        )

    def _kube_proxy(self):
        self._start(
            "kube-proxy",
            [
                binary("kube-proxy"),
                "--kubeconfig",
                str(self.kubeconfig),
                f"--hostname-override={NODE_NAME}",
                f"--cluster-cidr={POD_CIDR}",
                "--proxy-mode=iptables",
                "--oom-score-adj=0",
                "--conntrack-max-per-core=0",
                "--conntrack-tcp-timeout-established=0",
                "--conntrack-tcp-timeout-close-wait=0",
                f"--healthz-bind-address={NODE_IP}:10256",
                f"--metrics-bind-address={NODE_IP}:10249",
                "--profiling=false",
            ],
        )

    def restart_kubelet(self, **overrides):
        """Stop the kubelet, rewrite its config with `overrides`, start it again."""
        self._stop_pid("kubelet", self.load()["pids"].get("kubelet"))
        (KUBELET_DIR / "config.yaml").write_text(yaml.safe_dump(self.kubelet_config(**overrides)))
        self._kubelet()
        self.wait_node_ready()

    def wait_node_ready(self, timeout=120):
        s = self.session()
        deadline = time.monotonic() + timeout
        last = None
        while time.monotonic() < deadline:
            try:
                node = s.get(f"{self.server}/api/v1/nodes/{NODE_NAME}", timeout=5)
                if node.ok:
                    conds = {c["type"]: c for c in node.json()["status"].get("conditions", [])}
                    last = conds.get("Ready")
                    if last and last["status"] == "True":
                        return
            except requests.RequestException as e:
                last = str(e)
            for name, proc in self.procs.items():
                if not proc.alive():
                    raise RuntimeError(f"{name} exited:\n{proc.log_tail()}")
            time.sleep(0.5)
        raise TimeoutError(f"node not Ready: {last}\n{self.procs['kubelet'].log_tail()}")

    def wait_service_accounts(self, timeout=60):
        s = self.session()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            sa = s.get(
                f"{self.server}/api/v1/namespaces/default/serviceaccounts/default", timeout=5
            )
            if sa.ok and sa.json().get("secrets"):
                return
            time.sleep(0.3)
        raise TimeoutError("no token for the default ServiceAccount (controller-manager?)")

    # ------------------------------------------------------------ down
    def _stop_pid(self, name, pid, timeout=15):
        if not pid:
            return
        try:
            cmd = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode()
        except OSError:
            return
        if os.path.basename(cmd) != os.path.basename(self._expected_binary(name)):
            return  # the PID was reused by something else: not ours
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5)):
            try:
                os.kill(pid, sig)
            except ProcessLookupError:
                return
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline:
                if (
                    not pathlib.Path(f"/proc/{pid}").exists()
                    or pathlib.Path(f"/proc/{pid}/stat").read_text().split(") ")[1][0] == "Z"
                ):
                    if name in self.procs:
                        self.procs[name].popen.poll()
                    return
                time.sleep(0.1)

    @staticmethod
    def _expected_binary(name):
        return {"etcd-main": "etcd", "etcd-events": "etcd"}.get(name, name)

    def _remove_containers(self):
        """Every container of the k8s.io namespace, with containerd still up."""
        if not CONTAINERD_SOCK.exists() or self.ctr("version", check=False).returncode:
            return
        tasks = self.ctr("tasks", "list", "-q", check=False).stdout.split()
        for task in tasks:
            self.ctr("tasks", "kill", "-a", "-s", "SIGKILL", task, check=False)
        for task in tasks:
            for _ in range(50):
                if self.ctr("tasks", "delete", task, check=False).returncode == 0:
                    break
                time.sleep(0.1)
        for c in self.ctr("containers", "list", "-q", check=False).stdout.split():
            self.ctr("containers", "delete", c, check=False)

    def down(self, verify=True):
        """Stop every process we started and restore the host. Returns what remains."""
        t0 = time.monotonic()
        self.load()
        pids = self.state.get("pids", {})
        before = self.state.get("snapshot")
        # kubelet first, so nothing restarts containers; containers while containerd runs.
        self._stop_pid("kubelet", pids.get("kubelet"))
        self._remove_containers()
        for name in (
            "containerd",
            "kube-proxy",
            "kube-scheduler",
            "kube-controller-manager",
            "kube-apiserver",
            "etcd-events",
            "etcd-main",
        ):
            self._stop_pid(name, pids.get(name))
        for name, pid in pids.items():  # anything else a test registered
            self._stop_pid(name, pid)
        host.kill_leftovers()
        # kube-proxy's own cleanup of its rules; restore() removes whatever chains remain.
        if (BIN / "kube-proxy").exists():
            run(str(BIN / "kube-proxy"), "--cleanup", "--proxy-mode=iptables", check=False)
        keep_logs = os.environ.get("KSE_E2E_KEEP_LOGS")
        if keep_logs and self.logs.exists():
            shutil.rmtree(keep_logs, ignore_errors=True)
            shutil.copytree(self.logs, keep_logs)
        host.restore(before)
        self.timings["down"] = time.monotonic() - t0
        self.state = {}
        if not verify or before is None:
            return []
        return host.differences(before, host.snapshot())

    def rss_mib(self) -> float:
        """Resident memory of the cluster's own processes (not the pods'), MiB."""
        total = 0
        for pid in self.load().get("pids", {}).values():
            try:
                with open(f"/proc/{pid}/status") as f:
                    total += next(int(s.split()[1]) for s in f if s.startswith("VmRSS:"))
            except (OSError, StopIteration):
                pass
        return total / 1024

    def disk_mib(self) -> float:
        """Disk used under WORK (etcd, containerd's content and snapshots), MiB."""
        out = run("du", "-sm", str(self.work), check=False).stdout.split()
        return float(out[0]) if out else 0.0

    def check(self):
        self.load()
        before = self.state.get("snapshot")
        if before is None:
            return ["no snapshot: the cluster is not up"]
        return host.differences(before, host.snapshot())


def main(argv):
    cmd = argv[0] if argv else ""
    cluster = Cluster()
    if cmd == "up":
        from . import image  # noqa: PLC0415  (buildah and mmdebstrap only when the image is built)

        cluster.up(images=[image.build()])
        print(
            f"cluster: up in {cluster.timings['up']:.0f}s; export KUBECONFIG={cluster.kubeconfig}"
        )
    elif cmd == "down":
        remains = cluster.down()
        for line in remains:
            print("remains:", line)
        print(
            f"cluster: down in {cluster.timings['down']:.0f}s; host "
            f"{'NOT clean' if remains else 'clean'}"
        )
        return 1 if remains else 0
    elif cmd == "check":
        diffs = cluster.check()
        print("\n".join(diffs) or "no difference from the snapshot taken before up")
    elif cmd == "env":
        print(f"export KUBECONFIG={cluster.kubeconfig}")
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
