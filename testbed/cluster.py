"""A real single-node Kubernetes 1.34 cluster on this host, and a teardown that leaves it clean.

    python -m testbed.cluster up        start it (about a minute from cached binaries)
    python -m testbed.cluster down      stop it and restore the host; exit 1 if anything remains
    python -m testbed.cluster check     compare the host with the snapshot taken before `up`
    python -m testbed.cluster env       KUBECONFIG=... for a shell

Parts: etcd 3.7 for the main store over TLS on 127.0.0.1:2379 and the bridge address, a
second etcd for events (`--etcd-servers-overrides=/events#...`, small quota),
kube-apiserver, kube-controller-manager and kube-scheduler (testbed/control_plane.py),
kubelet and kube-proxy (testbed/node.py), all built from the Go module proxy
(.ci/setup.d/40-kubernetes.sh, 26-etcd.sh, 50-containerd.sh: containerd 2.3 with its CRI),
CNI bridge + host-local from containernetworking-plugins. testbed/node.py says what this host takes
to run them (docs/deploy.md "Tested end to end" has the long version); this module starts
them in order, and stops them.

The kubelet and kube-proxy change sysctls, iptables, cgroups, mounts and files under
/var/lib/kubelet and /var/log: `up` snapshots the host first, `down` restores it and
`check` (also run by `down`) lists whatever differs (testbed/host.py).

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
import subprocess
import sys
import time

import requests

from . import control_plane, host, node
from .builds import kube_binary
from .control_plane import API_PORT, EVENTS_QUOTA, PORTS, kubeconfig
from .host import BRIDGE, KUBELET_DIR, WORK, run
from .node import NODE_IP, PAUSE_IMAGE
from .ports import port_is_free
from .procs import Proc, stop_pid, wait_for_port


def current_kubectl() -> str:
    """The cluster's own kubectl (1.34, kustomize v5), or $KUSTOMIZE_KUBECTL."""
    return os.environ.get("KUSTOMIZE_KUBECTL") or kube_binary("kubectl")


class Cluster:
    """The cluster's parts and their state; `up()` and `down()` (also from a fresh object)."""

    def __init__(self, work=WORK, events_quota=EVENTS_QUOTA):
        self.work = pathlib.Path(work)
        self.events_quota = events_quota
        self.pki = self.work / "pki"
        self.logs = self.work / "logs"
        self.state_file = self.work / "state.json"
        self.kubeconfig = self.work / "admin.kubeconfig"
        self.server = f"https://{NODE_IP}:{API_PORT}"
        self.state = {}
        self.procs = {}
        self.commands = {}  # name -> (argv, env) it was started with, for restart()
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

    ctr = staticmethod(node.ctr)

    # ------------------------------------------------------------ up
    def up(self, images=()):
        """Start everything; `images` are docker-archive tarballs to import into containerd."""
        t0 = time.monotonic()
        if self.load() or pathlib.Path(f"/sys/class/net/{BRIDGE}").exists() or KUBELET_DIR.exists():
            print("cluster: leftovers of an earlier run; cleaning them first", file=sys.stderr)
            self.down(verify=False)
        for port in PORTS:
            if not port_is_free(port, "0.0.0.0"):
                raise RuntimeError(f"port {port} is taken; the e2e cluster needs it")
        for name in (
            "kube-apiserver",
            "kubelet",
            "kube-proxy",
            "kube-scheduler",
            "kube-controller-manager",
            "pause",
        ):
            kube_binary(name)
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
            host.share_netns_dir()
            self._network()
            self._pki()
            self._etcds()
            self._apiserver()
            self._control_plane()
            self._containerd(images)
            self._kubelet()
            self._kube_proxy()
            node.wait_ready(self.session(), self.server, self.procs)
            control_plane.wait_service_accounts(self.session(), self.server)
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
        self.commands[name] = (argv, env)
        self.state["pids"][name] = proc.pid
        self.save()
        return proc

    def _network(self):
        node.create_network(self.work / "cni-ipam")

    def _pki(self):
        control_plane.make_pki(self.pki, self.admin_token)
        kubeconfig(self.kubeconfig, self.server, self.pki / "ca.crt", self.admin_token)

    def _etcds(self):
        # All members first: a member of a new cluster waits for its peers.
        started = [
            (port, self._start(f"etcd-{name}", argv))
            for name, port, argv in control_plane.etcds(
                self.work, self.pki / "etcd", self.events_quota
            )
        ]
        for port, proc in started:
            wait_for_port(port, proc=proc, timeout=30)

    def _apiserver(self):
        argv = control_plane.apiserver_argv(
            kube_binary("kube-apiserver"), self.pki, self.work / "apiserver-certs"
        )
        proc = self._start("kube-apiserver", argv)
        wait_for_port(API_PORT, host=NODE_IP, proc=proc, timeout=60)
        self.wait_apiserver()

    def _control_plane(self):
        self._start(
            "kube-controller-manager",
            control_plane.controller_manager_argv(
                kube_binary("kube-controller-manager"), self.kubeconfig, self.pki
            ),
        )
        self._start(
            "kube-scheduler",
            control_plane.scheduler_argv(kube_binary("kube-scheduler"), self.kubeconfig),
        )

    def _containerd(self, images):
        config = node.write_containerd_config(self.work)
        proc = self._start("containerd", node.containerd_argv(config), env=node.containerd_env())
        node.wait_containerd(proc)
        from . import image  # noqa: PLC0415  (buildah and mmdebstrap only when the image is built)

        t = time.monotonic()
        for archive in (image.pause_archive(kube_binary("pause"), PAUSE_IMAGE), *images):
            self.import_image(archive)
        self.timings["images"] = time.monotonic() - t

    def import_image(self, archive):
        self.ctr("images", "import", str(archive))

    @property
    def etcd_client(self):
        """(CA, certificate, key) of the etcd members' client pair, the one the API
        server's health checks use."""
        pki = self.pki / "etcd"
        return pki / "ca.crt", pki / "healthcheck-client.crt", pki / "healthcheck-client.key"

    def etcd_session(self):
        """requests to the etcd members as their client."""
        ca, cert, key = self.etcd_client
        s = requests.Session()
        s.trust_env = False
        s.verify = str(ca)
        s.cert = (str(cert), str(key))
        return s

    def etcd_client_secret(self, namespace, name):
        """A Secret of the client pair (ca.crt, tls.crt, tls.key), what an exporter reading
        the TLS members mounts."""
        ca, cert, key = self.etcd_client
        self.kubectl(
            "-n",
            namespace,
            "create",
            "secret",
            "generic",
            name,
            f"--from-file=ca.crt={ca}",
            f"--from-file=tls.crt={cert}",
            f"--from-file=tls.key={key}",
        )

    def add_registry(self, host, endpoint):
        node.add_registry(self.work, host, endpoint)

    def _kubelet(self):
        node.write_kubelet_config(node.kubelet_config(self.pki / "ca.crt"))
        self._start("kubelet", node.kubelet_argv(kube_binary("kubelet"), self.kubeconfig))

    def _kube_proxy(self):
        self._start("kube-proxy", node.kube_proxy_argv(kube_binary("kube-proxy"), self.kubeconfig))

    def stop_process(self, name):
        """Stop one of the cluster's processes by PID (SIGTERM, then SIGKILL)."""
        self._stop_pid(name, self.state["pids"][name])

    def start_process(self, name):
        """Start a stopped process again with the command line it had."""
        argv, env = self.commands[name]
        return self._start(name, argv, env=env)

    def restart(self, name, down_seconds=0.0):
        """As a supervisor restarts a crashed process: stopped, `down_seconds`, started."""
        self.stop_process(name)
        time.sleep(down_seconds)
        return self.start_process(name)

    def wait_apiserver(self):
        control_plane.wait_apiserver(self.session(), self.server, self.procs["kube-apiserver"])

    def wait_node_ready(self):
        node.wait_ready(self.session(), self.server, self.procs)

    def wait_containerd(self):
        node.wait_containerd(self.procs["containerd"])

    # ------------------------------------------------------------ down
    def _stop_pid(self, name, pid):
        binary = "etcd" if name.startswith("etcd-") else name
        if pid and stop_pid(pid, binary) and name in self.procs:
            self.procs[name].popen.poll()  # reap it, if this process started it

    def down(self, verify=True):
        """Stop every process we started and restore the host. Returns what remains."""
        t0 = time.monotonic()
        self.load()
        pids = self.state.get("pids", {})
        before = self.state.get("snapshot")
        # kubelet first, so nothing restarts containers; containers while containerd runs.
        self._stop_pid("kubelet", pids.get("kubelet"))
        node.remove_containers()
        for name in (
            "containerd",
            "kube-proxy",
            "kube-scheduler",
            "kube-controller-manager",
            "kube-apiserver",
        ):
            self._stop_pid(name, pids.get(name))
        for name, pid in pids.items():  # anything else a test registered
            self._stop_pid(name, pid)
        host.kill_leftovers()
        # kube-proxy's own cleanup of its rules; restore() removes whatever chains remain.
        try:
            run(kube_binary("kube-proxy"), "--cleanup", "--proxy-mode=iptables", check=False)
        except FileNotFoundError:
            pass  # never built: it never ran
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
