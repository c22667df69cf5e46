"""What the e2e cluster changes on this host, and putting it back.

`snapshot()` before `up` records the sysctls the kubelet, kube-proxy and the CNI bridge
change, the paths the cluster creates, network namespaces, the bridge, iptables chains
(KUBE-*, CNI-*), mounts and cgroups; `restore(before)` undoes whatever is new once the
cluster's processes are stopped; `differences(before, snapshot())` lists what remains.
"""

import os
import pathlib
import shlex
import shutil
import signal
import subprocess
import time

# Host paths the cluster uses where the product's manifests expect them, and its own.
WORK = pathlib.Path(os.environ.get("KSE_E2E_WORK", "/var/lib/kse-e2e"))
KUBELET_DIR = pathlib.Path("/var/lib/kubelet")
CONTAINERD_STATE = pathlib.Path("/run/containerd")
CONTAINERD_ROOT = pathlib.Path("/var/lib/containerd")
CONTAINERD_SOCK = CONTAINERD_STATE / "containerd.sock"
CNI_CONF_DIR = pathlib.Path("/etc/cni/net.d")
CNI_CONF = CNI_CONF_DIR / "10-kse-e2e.conflist"
CNI_BIN = "/usr/lib/cni"
LOG_DIRS = (pathlib.Path("/var/log/pods"), pathlib.Path("/var/log/containers"))
BRIDGE = "kse0"

# Sysctls the kubelet (setupKernelTunables), kube-proxy and the CNI bridge plugin change.
SAVED_SYSCTLS = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
    "net/ipv4/conf/all/route_localnet",
    "net/ipv4/ip_forward",
    "net/ipv6/conf/all/forwarding",
    "net/ipv4/conf/default/forwarding",
    "net/ipv4/conf/all/forwarding",
    "net/bridge/bridge-nf-call-iptables",
    "net/bridge/bridge-nf-call-ip6tables",
    "net/netfilter/nf_conntrack_max",
    "net/netfilter/nf_conntrack_tcp_timeout_established",
    "net/netfilter/nf_conntrack_tcp_timeout_close_wait",
)
# Paths the cluster creates; each must be gone after `down` unless it existed before `up`.
OWNED_PATHS = (
    WORK,
    KUBELET_DIR,
    CONTAINERD_STATE,
    CNI_CONF,
    *LOG_DIRS,
    pathlib.Path("/var/lib/cni"),
    pathlib.Path("/var/lib/dockershim"),
    pathlib.Path("/var/run/kubernetes"),
    pathlib.Path("/etc/kubernetes"),
    pathlib.Path("/opt/containerd"),
    pathlib.Path("/opt/cni"),
    CONTAINERD_ROOT,
    # deploy/'s imagepull component mounts both with hostPath DirectoryOrCreate: the
    # kubelet makes them where they are missing.
    pathlib.Path("/etc/containerd"),
    pathlib.Path("/etc/docker/certs.d"),
)
# Without a snapshot (a crashed `up`), `down` removes only what nothing else could own.
CORE_PATHS = (WORK, KUBELET_DIR, CONTAINERD_STATE, CNI_CONF, *LOG_DIRS)
CGROUP_ROOT = pathlib.Path("/sys/fs/cgroup")
IPTABLES = ("iptables", "ip6tables", "iptables-legacy", "ip6tables-legacy")
OUR_CHAINS = ("KUBE-", "CNI-")
NETNS_DIR = pathlib.Path("/run/netns")


def run(*argv, check=True, quiet=True, **kw):
    return subprocess.run(argv, check=check, text=True, capture_output=quiet, **kw)


def _sysctl_path(key: str) -> pathlib.Path:
    return pathlib.Path("/proc/sys") / key


def read_sysctls() -> dict:
    out = {}
    for key in SAVED_SYSCTLS:
        try:
            out[key] = _sysctl_path(key).read_text().strip()
        except OSError:
            out[key] = None
    return out


def iptables_chains() -> dict:
    """Our chains (KUBE-*, CNI-*) and rules jumping to them, per iptables flavour."""
    found = {}
    for tool in IPTABLES:
        if not shutil.which(tool + "-save"):
            continue
        res = run(tool + "-save", check=False)
        lines = [
            ln
            for ln in res.stdout.splitlines()
            if any(f":{p}" in ln or f" {p}" in ln for p in OUR_CHAINS)
        ]
        if lines:
            found[tool] = lines
    return found


def our_mounts() -> list:
    roots = (
        str(KUBELET_DIR),
        str(WORK),
        str(CONTAINERD_STATE),
        str(CONTAINERD_ROOT),
        "/run/netns/cni-",
        "/var/run/netns/cni-",
    )
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            point = line.split()[4]
            if point.startswith(roots):
                out.append(point)
    return out


def netns_dir_mounted() -> bool:
    """Whether /run/netns is a mount point of its own (what `ip netns add` makes it)."""
    with open("/proc/self/mountinfo") as f:
        return any(line.split()[4] == str(NETNS_DIR) for line in f)


def share_netns_dir() -> None:
    """Make /run/netns a shared bind mount of itself, as `ip netns add` does, before the
    CNI plugin mounts pods' namespaces in it. A pod's namespace mounted while /run/netns is
    a plain directory sits on the root mount; the first `ip netns add` after that (a test's
    own namespace) binds the directory over it, and containerd can then neither unmount
    nor remove that pod's namespace: the pod stays Terminating ("remove netns: unlinkat
    ...: device or resource busy")."""
    if netns_dir_mounted():
        return
    NETNS_DIR.mkdir(parents=True, exist_ok=True)
    run("mount", "--bind", str(NETNS_DIR), str(NETNS_DIR))
    run("mount", "--make-shared", str(NETNS_DIR))


def kube_cgroups() -> list:
    out = []
    if CGROUP_ROOT.is_dir():
        for hier in CGROUP_ROOT.iterdir():
            for name in ("kubepods", "kubepods.slice"):
                if (hier / name).exists():
                    out.append(str(hier / name))
    return out


def snapshot() -> dict:
    return {
        "sysctls": read_sysctls(),
        "paths": sorted(str(p) for p in OWNED_PATHS if p.exists()),
        "netns": sorted(os.listdir(NETNS_DIR)) if NETNS_DIR.is_dir() else [],
        "netns_dir_mounted": netns_dir_mounted(),
        "links": [BRIDGE] if pathlib.Path(f"/sys/class/net/{BRIDGE}").exists() else [],
        "iptables": iptables_chains(),
        "mounts": our_mounts(),
        "cgroups": kube_cgroups(),
    }


def differences(before: dict, after: dict) -> list:
    """What `after` has that `before` had not (or a sysctl with another value)."""
    diffs = []
    for key, old in before["sysctls"].items():
        new = after["sysctls"].get(key)
        if new != old:
            diffs.append(f"sysctl {key}: {old} -> {new}")
    for field in ("paths", "netns", "links", "mounts", "cgroups"):
        for item in sorted(set(after[field]) - set(before[field])):
            diffs.append(f"{field}: {item} remains")
    for tool, lines in after["iptables"].items():
        extra = sorted(set(lines) - set(before["iptables"].get(tool, [])))
        for line in extra:
            diffs.append(f"{tool}: {line}")
    return diffs


def kill_leftovers():
    """Container processes still in the kubelet's cgroups, and runc shims serving our
    containerd's socket (a shim outlives containerd): SIGKILL, by PID."""
    pids = set()
    for top in kube_cgroups():
        for procs in pathlib.Path(top).rglob("cgroup.procs"):
            try:
                pids.update(int(x) for x in procs.read_text().split())
            except OSError:
                pass
    for proc in pathlib.Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            argv = (proc / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if (
            argv
            and argv[0].endswith(b"containerd-shim-runc-v2")
            and str(CONTAINERD_SOCK).encode() in argv
        ):
            pids.add(int(proc.name))
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    # SIGKILL is delivered asynchronously: gone (or a zombie for its parent to reap).
    deadline = time.monotonic() + 10
    while pids and time.monotonic() < deadline:
        pids = {pid for pid in pids if _running(pid)}
        time.sleep(0.02)


def _running(pid: int) -> bool:
    try:
        return pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def clean_iptables(before):
    for tool in IPTABLES:
        if not shutil.which(tool + "-save"):
            continue
        keep = set(before.get(tool, []))
        table = None
        rules, chains = [], []
        for line in run(tool + "-save", check=False).stdout.splitlines():
            if line.startswith("*"):
                table = line[1:]
            elif line in keep:
                continue
            elif line.startswith(":") and line[1:].startswith(OUR_CHAINS):
                chains.append((table, line[1:].split()[0]))
            elif line.startswith("-A ") and any(
                f"-j {p}" in line or f"-g {p}" in line for p in OUR_CHAINS
            ):
                chain = line.split()[1]
                if not chain.startswith(OUR_CHAINS):
                    rules.append((table, line))
        for table, line in rules:
            run(tool, "-w", "-t", table, "-D", *shlex.split(line)[1:], check=False)
        for table, chain in chains:
            run(tool, "-w", "-t", table, "-F", chain, check=False)
        for table, chain in chains:
            run(tool, "-w", "-t", table, "-X", chain, check=False)


def unmount_ours(before):
    for _ in range(3):
        points = [p for p in our_mounts() if p not in before]
        if not points:
            return
        for point in sorted(points, key=len, reverse=True):
            run("umount", "-l", point, check=False)


def remove_cgroups():
    for top in kube_cgroups():
        dirs = sorted(
            (p for p in pathlib.Path(top).rglob("*") if p.is_dir()),
            key=lambda p: len(p.parts),
            reverse=True,
        )
        for d in [*dirs, pathlib.Path(top)]:
            for _ in range(20):
                try:
                    d.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.1)


def restore(before: dict | None) -> None:
    """Put the host back as `before` found it (None: a crashed `up` left no snapshot, so
    remove only what nothing else could own). The cluster's processes must be stopped."""
    clean_iptables(before["iptables"] if before else {})
    unmount_ours(before["mounts"] if before else [])
    netns_before = set(before["netns"]) if before else set()
    if NETNS_DIR.is_dir():
        for ns in os.listdir(NETNS_DIR):
            if ns.startswith("cni-") and ns not in netns_before:
                run("ip", "netns", "delete", ns, check=False)
    if (
        before
        and not before.get("netns_dir_mounted", True)
        and netns_dir_mounted()
        and not any(NETNS_DIR.iterdir())
    ):
        run("umount", str(NETNS_DIR), check=False)
    if pathlib.Path(f"/sys/class/net/{BRIDGE}").exists():
        run("ip", "link", "delete", BRIDGE, check=False)
    remove_cgroups()
    if before:
        for key, value in before["sysctls"].items():
            if (
                value is not None
                and _sysctl_path(key).exists()
                and _sysctl_path(key).read_text().strip() != value
            ):
                _sysctl_path(key).write_text(value)
    existed = (
        set(before["paths"]) if before else {str(p) for p in OWNED_PATHS if p not in CORE_PATHS}
    )
    for path in OWNED_PATHS:
        if str(path) not in existed and (path.exists() or path.is_symlink()):
            if path.is_dir() and not path.is_symlink():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink()
    if CNI_CONF_DIR.exists() and not any(CNI_CONF_DIR.iterdir()) and str(CNI_CONF) not in existed:
        for d in (CNI_CONF_DIR, CNI_CONF_DIR.parent):
            if not any(d.iterdir()):
                d.rmdir()
