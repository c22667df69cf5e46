"""Where the binaries .ci/setup.d builds from the Go module proxy live, and their versions.

The version of each comes from its go.mod under .ci/go (the one place it is pinned), so a
version bump there moves the setup step, the tests and the benches together:

    kube_binary("kube-apiserver")   Kubernetes (.ci/setup.d/40-kubernetes.sh), $KUBE_DIR
    etcd36_binary()                 etcd 3.6 (.ci/setup.d/26-etcd36.sh), $ETCD36_BIN
    kube_rbac_proxy_binary()        kube-rbac-proxy (.ci/setup.d/42-kube-rbac-proxy.sh),
                                    $KUBE_RBAC_PROXY_BIN
    kwok_binary()                   kwok (.ci/setup.d/47-kwok.sh), $KWOK_BIN
    cluster_autoscaler_binary()     cluster-autoscaler, kwok provider
                                    (.ci/setup.d/48-cluster-autoscaler.sh),
                                    $CLUSTER_AUTOSCALER_BIN
"""

import functools
import os
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent
GO_MODULES = ROOT / ".ci" / "go"
CACHE = pathlib.Path(os.environ.get("KSE_CACHE", "/var/cache/kube-scale-exporter"))


@functools.cache
def pinned(build: str, module: str) -> str:
    """The version .ci/go/BUILD/go.mod requires of `module` (e.g. "v1.34.4")."""
    text = (GO_MODULES / build / "go.mod").read_text()
    found = re.search(rf"^(?:require)?\s*{re.escape(module)} (v[0-9][^\s]*)", text, re.M)
    if not found:
        raise LookupError(f".ci/go/{build}/go.mod requires no {module}")
    return found.group(1)


def kube_version() -> str:
    return pinned("kubernetes", "k8s.io/kubernetes")


def etcd36_version() -> str:
    return pinned("etcd", "go.etcd.io/etcd/server/v3")


def kube_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("KUBE_DIR", str(CACHE / f"kubernetes-{kube_version()}")))


def kube_binary(name: str) -> str:
    path = kube_dir() / name
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{path} missing: run .ci/setup.d/40-kubernetes.sh")
    return str(path)


def etcd36_binary() -> str:
    path = os.environ.get("ETCD36_BIN", str(CACHE / f"etcd-{etcd36_version()}" / "etcd"))
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{path} missing: run .ci/setup.d/26-etcd36.sh")
    return path


def kube_rbac_proxy_version() -> str:
    return pinned("kube-rbac-proxy", "github.com/brancz/kube-rbac-proxy")


def kube_rbac_proxy_binary() -> str:
    default = CACHE / f"kube-rbac-proxy-{kube_rbac_proxy_version()}" / "kube-rbac-proxy"
    path = os.environ.get("KUBE_RBAC_PROXY_BIN", str(default))
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{path} missing: run .ci/setup.d/42-kube-rbac-proxy.sh")
    return path


def kwok_version() -> str:
    return pinned("kwok", "sigs.k8s.io/kwok")


def kwok_binary() -> str:
    path = os.environ.get("KWOK_BIN", str(CACHE / f"kwok-{kwok_version()}" / "kwok"))
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{path} missing: run .ci/setup.d/47-kwok.sh")
    return path


def cluster_autoscaler_version() -> str:
    return pinned("cluster-autoscaler", "k8s.io/autoscaler/cluster-autoscaler")


def cluster_autoscaler_binary() -> str:
    version = cluster_autoscaler_version()
    default = CACHE / f"cluster-autoscaler-{version}" / "cluster-autoscaler"
    path = os.environ.get("CLUSTER_AUTOSCALER_BIN", str(default))
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{path} missing: run .ci/setup.d/48-cluster-autoscaler.sh")
    return path


def version_line(binary: str) -> str:
    """What `binary --version` prints first (for test headers and bench reports)."""
    try:
        out = subprocess.run(
            [binary, "--version"], capture_output=True, text=True, timeout=10, check=False
        )
    except OSError as e:
        return f"{binary}: {e.strerror}"
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else "?"
