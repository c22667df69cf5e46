"""Where the binaries .ci/setup.d builds from the Go module proxy live, and their versions.

The version of each comes from its go.mod under .ci/go (the one place it is pinned), so a
version bump there moves the setup step, the tests and the benches together:

    kube_binary("kube-apiserver")   Kubernetes 1.37 (.ci/setup.d/40-kubernetes.sh), $KUBE_DIR;
                                    release="1.35": its kube-apiserver alone, $KUBE_1_35_DIR
    etcd_binary("3.7")              etcd 3.7 and 3.6 (.ci/setup.d/26-etcd.sh), $ETCD37_BIN,
                                    $ETCD36_BIN
    prometheus_binary("3.16", "promtool")
                                    Prometheus 3.16 and 3.13 LTS, prometheus and promtool
                                    (.ci/setup.d/15-prometheus.sh), $PROMETHEUS_3_16_DIR, ...
    thanos_binary()                 Thanos, every component in one binary
                                    (.ci/bench.d/16-thanos.sh), $THANOS_DIR
    containerd_dir("2.3")           containerd 2.3 LTS and 2.4 (.ci/setup.d/50-containerd.sh),
                                    $CONTAINERD_2_3_DIR, $CONTAINERD_2_4_DIR
    kube_rbac_proxy_binary()        kube-rbac-proxy (.ci/bench.d/42-kube-rbac-proxy.sh),
                                    $KUBE_RBAC_PROXY_BIN
    kwok_binary()                   kwok (.ci/setup.d/47-kwok.sh), $KWOK_BIN
    cluster_autoscaler_binary()     cluster-autoscaler, kwok provider, and the CapacityBuffer
    capacity_buffer_crd()           CRD of the same release, from the tarball
                                    .ci/third-party.sha256 pins
                                    (.ci/setup.d/48-cluster-autoscaler.sh),
                                    $CLUSTER_AUTOSCALER_DIR
    helm_binary()                   Helm 4 (.ci/setup.d/48-helm.sh), $HELM_BIN
    actionlint_binary()             actionlint (.ci/setup.d/45-image.sh), $ACTIONLINT_BIN
    crictl_binary(), spegel_binary()
                                    crictl (cri-tools) and Spegel, the latter from
                                    ../shared/third_party (.ci/setup.d/54-registry-mirrors.sh),
                                    $CRICTL_BIN, $SPEGEL_BIN
    jb_binary()                     jsonnet-bundler (.ci/setup.d/49-mixin-tools.sh), $JB_BIN
    go_jsonnet_binary("jsonnet")    go-jsonnet's jsonnet and jsonnetfmt (the same step),
                                    $GO_JSONNET_DIR
    pint_binary()                   pint (the same step), $PINT_BIN
    mixtool_binary()                mixtool and Grafana's dashboard-linter, from the tarballs
    dashboard_linter_binary()       .ci/third-party.sha256 pins (.ci/setup.d/49-mixin-linters.sh),
                                    $MIXTOOL_BIN, $DASHBOARD_LINTER_BIN
    node_exporter_binary()          node_exporter (.ci/bench.d/16-node-exporter.sh),
                                    $NODE_EXPORTER_BIN
    kube_state_metrics_binary()     kube-state-metrics (.ci/bench.d/48-kube-state-metrics.sh),
                                    $KUBE_STATE_METRICS_BIN
"""

import functools
import os
import pathlib
import re
import subprocess
import sys

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


# Each Kubernetes release the tests run: its go.mod under .ci/go. 1.37 is the whole cluster;
# 1.35, the oldest release upstream supports, is its kube-apiserver alone.
KUBE_RELEASES = {"1.37": "kubernetes", "1.35": "kubernetes-1.35"}
KUBE_RELEASE = "1.37"


def kube_version(release: str = KUBE_RELEASE) -> str:
    return pinned(KUBE_RELEASES[release], "k8s.io/kubernetes")


def kube_dir(release: str = KUBE_RELEASE) -> pathlib.Path:
    env = "KUBE_DIR" if release == KUBE_RELEASE else f"KUBE_{release.replace('.', '_')}_DIR"
    default = CACHE / f"kubernetes-{kube_version(release)}"
    return pathlib.Path(os.environ.get(env, str(default)))


def kube_binary(name: str, release: str = KUBE_RELEASE) -> str:
    path = kube_dir(release) / name
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{path} missing: run .ci/setup.d/40-kubernetes.sh")
    return str(path)


def cached_binary(env: str, default: pathlib.Path, step: str, name: str = "") -> str:
    """$ENV, else where its step (`setup.d/NN-X.sh`, or `bench.d/` for a bench's peer that no
    test runs) caches it; missing, the error names the step. With `name`, $ENV and `default`
    are the directory that holds it."""
    path = os.environ.get(env, str(default))
    if name:
        path = os.path.join(path, name)
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{path} missing: run .ci/{step}")
    return path


# The etcd line kubeadm 1.37 runs: every test's and bench's control plane.
CONTROL_PLANE_ETCD = "3.7"


def etcd_version(line: str) -> str:
    """The release of etcd LINE ("3.6", "3.7") .ci/go/etcd-LINE/go.mod pins, e.g. "v3.7.3"."""
    return pinned(f"etcd-{line}", "go.etcd.io/etcd/server/v3")


def etcd_binary(line: str) -> str:
    default = CACHE / f"etcd-{etcd_version(line)}" / "etcd"
    return cached_binary(f"ETCD{line.replace('.', '')}_BIN", default, "setup.d/26-etcd.sh")


def prometheus_version(line: str) -> str:
    """Prometheus LINE's release ("3.16" -> "3.16.0"): its module's tag v0.3YY.Z is 3.YY.Z."""
    tag = pinned(f"prometheus-{line}", "github.com/prometheus/prometheus")
    minor, patch = tag.removeprefix("v0.3").split(".")
    return f"3.{int(minor)}.{patch}"


def prometheus_binary(line: str, name: str) -> str:
    """`name` (prometheus or promtool) of Prometheus LINE ("3.13", "3.16")."""
    default = CACHE / f"prometheus-{prometheus_version(line)}"
    env = f"PROMETHEUS_{line.replace('.', '_')}_DIR"
    return cached_binary(env, default, "setup.d/15-prometheus.sh", name)


def thanos_version() -> str:
    return pinned("thanos", "github.com/thanos-io/thanos")


def thanos_binary() -> str:
    default = CACHE / f"thanos-{thanos_version()}"
    return cached_binary("THANOS_DIR", default, "bench.d/16-thanos.sh", "thanos")


def containerd_version(line: str) -> str:
    return pinned(f"containerd-{line}", "github.com/containerd/containerd/v2")


def containerd_dir(line: str) -> str:
    """The directory of containerd LINE's ("2.3", "2.4") containerd, ctr and shim."""
    default = CACHE / f"containerd-{containerd_version(line)}"
    env = f"CONTAINERD_{line.replace('.', '_')}_DIR"
    cached_binary(env, default, "setup.d/50-containerd.sh", "containerd")
    return os.environ.get(env, str(default))


def kube_rbac_proxy_version() -> str:
    return pinned("kube-rbac-proxy", "github.com/brancz/kube-rbac-proxy")


def kube_rbac_proxy_binary() -> str:
    default = CACHE / f"kube-rbac-proxy-{kube_rbac_proxy_version()}" / "kube-rbac-proxy"
    return cached_binary("KUBE_RBAC_PROXY_BIN", default, "bench.d/42-kube-rbac-proxy.sh")


def kwok_version() -> str:
    return pinned("kwok", "sigs.k8s.io/kwok")


def kwok_binary() -> str:
    return cached_binary(
        "KWOK_BIN", CACHE / f"kwok-{kwok_version()}" / "kwok", "setup.d/47-kwok.sh"
    )


def helm_version() -> str:
    return pinned("helm", "helm.sh/helm/v4")


def crictl_version() -> str:
    return pinned("cri-tools", "sigs.k8s.io/cri-tools")


def crictl_binary() -> str:
    default = CACHE / f"cri-tools-{crictl_version()}" / "crictl"
    return cached_binary("CRICTL_BIN", default, "setup.d/54-registry-mirrors.sh")


def spegel_binary() -> str:
    """Spegel, built from the tarball .ci/third-party.sha256 pins (the proxy serves none)."""
    default = CACHE / f"spegel-{third_party_version('spegel')}" / "spegel"
    return cached_binary("SPEGEL_BIN", default, "setup.d/54-registry-mirrors.sh")


def helm_binary() -> str:
    return cached_binary(
        "HELM_BIN", CACHE / f"helm-{helm_version()}" / "helm", "setup.d/48-helm.sh"
    )


def kubeconform_version() -> str:
    return pinned("kubeconform", "github.com/yannh/kubeconform")


def kubeconform_binary() -> str:
    default = CACHE / f"kubeconform-{kubeconform_version()}" / "kubeconform"
    return cached_binary("KUBECONFORM_BIN", default, "setup.d/48-kubeconform.sh")


CLUSTER_AUTOSCALER_STEP = "setup.d/48-cluster-autoscaler.sh"


def actionlint_version() -> str:
    return pinned("actionlint", "github.com/rhysd/actionlint")


def actionlint_binary() -> str:
    default = CACHE / f"actionlint-{actionlint_version()}" / "actionlint"
    return cached_binary("ACTIONLINT_BIN", default, "setup.d/45-image.sh")


def cluster_autoscaler_version() -> str:
    """The release .ci/third-party.sha256 pins (e.g. "1.36.1")."""
    return third_party_version("cluster-autoscaler")


def cluster_autoscaler_dir() -> pathlib.Path:
    default = CACHE / f"cluster-autoscaler-{cluster_autoscaler_version()}"
    return pathlib.Path(os.environ.get("CLUSTER_AUTOSCALER_DIR", str(default)))


def cluster_autoscaler_binary() -> str:
    return cached_binary(
        "CLUSTER_AUTOSCALER_DIR",
        cluster_autoscaler_dir(),
        CLUSTER_AUTOSCALER_STEP,
        "cluster-autoscaler",
    )


def cluster_autoscaler_logged_version(binary: str) -> str:
    """What the binary logs first with --v=1 ("Cluster Autoscaler 1.36.1"): it has no
    --version flag, and a kubeconfig that does not exist stops it right after."""
    line = version_line(binary, "--v=1", "--kubeconfig=/nonexistent")
    return line.split("] ", 1)[-1]


def capacity_buffer_crd() -> pathlib.Path:
    """The CapacityBuffer CRD of the same release, as its source tarball has it."""
    path = cluster_autoscaler_dir() / "autoscaling.x-k8s.io_capacitybuffers.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{path} missing: run .ci/{CLUSTER_AUTOSCALER_STEP}")
    return path


MIXIN_TOOLS_STEP = "setup.d/49-mixin-tools.sh"


def jb_version() -> str:
    return pinned("jsonnet-bundler", "github.com/jsonnet-bundler/jsonnet-bundler")


def jb_binary() -> str:
    default = CACHE / f"jsonnet-bundler-{jb_version()}" / "jb"
    return cached_binary("JB_BIN", default, MIXIN_TOOLS_STEP)


def go_jsonnet_version() -> str:
    return pinned("go-jsonnet", "github.com/google/go-jsonnet")


def go_jsonnet_binary(name: str) -> str:
    """go-jsonnet's `jsonnet` or `jsonnetfmt`."""
    default = CACHE / f"go-jsonnet-{go_jsonnet_version()}"
    return cached_binary("GO_JSONNET_DIR", default, MIXIN_TOOLS_STEP, name)


def pint_version() -> str:
    return pinned("pint", "github.com/cloudflare/pint")


def pint_binary() -> str:
    default = CACHE / f"pint-{pint_version()}" / "pint"
    return cached_binary("PINT_BIN", default, MIXIN_TOOLS_STEP)


THIRD_PARTY_PINS = ROOT / ".ci" / "third-party.sha256"


@functools.cache
def third_party_version(name: str) -> str:
    """The commit or release .ci/third-party.sha256 pins NAME's source tarball at (its file
    name is NAME-VERSION.tar.gz): for the tools the module proxy does not serve."""
    text = THIRD_PARTY_PINS.read_text()
    found = re.search(rf"^[0-9a-f]{{64}}  {re.escape(name)}-([0-9a-f.]+)\.tar\.gz$", text, re.M)
    if not found:
        raise LookupError(f"{THIRD_PARTY_PINS} pins no {name} tarball")
    return found.group(1)


MIXIN_LINTERS_STEP = "setup.d/49-mixin-linters.sh"


def mixtool_binary() -> str:
    default = CACHE / f"mixtool-{third_party_version('mixtool')}" / "mixtool"
    return cached_binary("MIXTOOL_BIN", default, MIXIN_LINTERS_STEP)


def dashboard_linter_binary() -> str:
    version = third_party_version("dashboard-linter")
    default = CACHE / f"dashboard-linter-{version}" / "dashboard-linter"
    return cached_binary("DASHBOARD_LINTER_BIN", default, MIXIN_LINTERS_STEP)


def stamped_version(binary: str) -> str:
    """The commit a tool built from a tarball was built at: the stamp its setup step writes
    beside it (dashboard-linter has no version flag)."""
    try:
        return pathlib.Path(binary + ".version").read_text().strip()
    except OSError:
        return "?"


def node_exporter_version() -> str:
    return pinned("node-exporter", "github.com/prometheus/node_exporter")


def node_exporter_binary() -> str:
    default = CACHE / f"node-exporter-{node_exporter_version()}" / "node_exporter"
    return cached_binary("NODE_EXPORTER_BIN", default, "bench.d/16-node-exporter.sh")


def kube_state_metrics_version() -> str:
    return pinned("kube-state-metrics", "k8s.io/kube-state-metrics/v2")


def kube_state_metrics_binary() -> str:
    version = kube_state_metrics_version()
    default = CACHE / f"kube-state-metrics-{version}" / "kube-state-metrics"
    return cached_binary("KUBE_STATE_METRICS_BIN", default, "bench.d/48-kube-state-metrics.sh")


def version_line(binary: str, *ask: str) -> str:
    """What `binary --version` (or `binary ASK...`) prints first (for test headers and bench
    reports)."""
    try:
        out = subprocess.run(
            [binary, *(ask or ("--version",))],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
    except OSError as e:
        return f"{binary}: {e.strerror}"
    return (out.stdout or out.stderr).strip().splitlines()[0] if (out.stdout or out.stderr) else "?"


def main(argv: list[str]) -> int:
    """`python -m testbed.builds FINDER [ARG]` prints the path a finder above gives (for make),
    or says which setup step builds it and exits 1."""
    finder, *args = argv
    try:
        print(globals()[finder](*args))
    except FileNotFoundError as e:
        print(e, file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
