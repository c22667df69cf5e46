"""prometheus-operator, as a kube-prometheus user runs it, for tests and the e2e cluster.

    apply_crds(kubeconfig)                           the release's CRDs, server-side
    with running_operator(kubeconfig, log_dir, namespaces=[...]) as op:
        apply(kubeconfig, prometheus_objects())      Prometheus `k8s` in `monitoring`
        generated_config(kubeconfig)                 what the operator made of the monitors
        rule_files(kubeconfig)                       ... and of the PrometheusRules

    python -m testbed.operator images                builds both images, prints name and
                                                     archive of each (for `ctr images import`)
    python -m testbed.operator version               the operator's `--version`

The operator and prometheus-config-reloader of one release, built from the Go module proxy
by .ci/setup.d/44-prometheus-operator.sh (the release in .ci/go/prometheus-operator/go.mod)
into the cache with that release's CRDs. The operator runs on the host against a
kubeconfig (its KUBECONFIG; it has no flag for one), its web server on a free loopback
port, no admission webhook (a separate binary of the release, not started). The Prometheus
it manages runs the images below, which no registry serves here, each a static binary alone
from scratch: the reloader, and Prometheus 3.16 as .ci/setup.d/15-prometheus.sh builds it
(CGO off, without the web UI's assets).
"""

import base64
import contextlib
import gzip
import json
import os
import pathlib
import re
import subprocess
import sys

import yaml

from . import builds, image, prometheus
from .ports import free_port
from .procs import Proc, wait_for_port

MODULE = "github.com/prometheus-operator/prometheus-operator"
# The Prometheus release the operator's Prometheus runs: the newest the tests run.
PROMETHEUS_RELEASE = prometheus.NEWEST
CA_BUNDLE = "/etc/ssl/certs/ca-certificates.crt"
# What kube-prometheus names them; deploy/components/kube-rbac's metrics-reader comment
# binds this ServiceAccount.
NAMESPACE = "monitoring"
NAME = "k8s"
SERVICE_ACCOUNT = "prometheus-k8s"
METRICS_READER = "kube-scale-exporter-metrics-reader"
APP_LABEL = {"app.kubernetes.io/name": "kube-scale-exporter"}
TARGET_NAMESPACE = "kube-scale-exporter"


def release() -> str:
    """The release .ci/go/prometheus-operator/go.mod pins, as its tag (v0.93.0)."""
    return builds.pinned("prometheus-operator", MODULE)


def cache_dir() -> pathlib.Path:
    default = builds.CACHE / f"prometheus-operator-{release()}"
    return pathlib.Path(os.environ.get("PROMETHEUS_OPERATOR_DIR", default))


def binary(name: str) -> str:
    path = cache_dir() / name
    if not os.access(path, os.X_OK):
        raise FileNotFoundError(f"{path} missing: run .ci/setup.d/44-prometheus-operator.sh")
    return str(path)


def crd_dir() -> pathlib.Path:
    crds = cache_dir() / "crds"
    if not any(crds.glob("*.yaml")):
        raise FileNotFoundError(f"no CRDs in {crds}: run .ci/setup.d/44-prometheus-operator.sh")
    return crds


def version() -> str:
    """`operator --version`, first line: what was built, as the release stamps it."""
    return builds.version_line(binary("operator"))


def prometheus_version() -> str:
    """The Prometheus release the image carries, as the CR's spec.version wants it (v3.16.0):
    its binary's own `--version`, which 15-prometheus.sh stamps from the go.mod's pin."""
    binary = prometheus.binary(PROMETHEUS_RELEASE, "prometheus")
    out = subprocess.run(
        [binary, "--version"], capture_output=True, text=True, check=True, timeout=30
    )
    match = re.search(r"version (\d+\.\d+\.\d+)", out.stdout + out.stderr)
    if not match:
        raise RuntimeError(f"{binary} --version: {out.stdout}{out.stderr}")
    return "v" + match.group(1)


def reloader_image_name() -> str:
    return f"localhost/prometheus-config-reloader:{release()}"


def prometheus_image_name() -> str:
    return f"localhost/prometheus:{prometheus_version()}"


def reloader_image(log=sys.stderr) -> tuple[str, pathlib.Path]:
    """(name, docker-archive): the static reloader from scratch, where the operator's pod
    template runs it (/bin/prometheus-config-reloader), as nobody like the release's image."""
    name = reloader_image_name()
    src = binary("prometheus-config-reloader")
    archive = image.binary_archive(
        "prometheus-config-reloader",
        name,
        [(src, "/bin/prometheus-config-reloader")],
        entrypoint=["/bin/prometheus-config-reloader"],
        user="65534",
        description=f"prometheus-config-reloader {release()} from the Go module proxy "
        "(testbed/operator.py)",
        log=log,
    )
    return name, archive


def prometheus_image(log=sys.stderr) -> tuple[str, pathlib.Path]:
    """(name, docker-archive): the static Prometheus binary from scratch, as nobody, with
    this host's CA bundle where Go looks for it (a scrape over https with no ca_file). The
    operator gives it only args, so /bin/prometheus is the entrypoint, as upstream's; it
    mounts the data volume at /prometheus, the working directory, and the config, rules and
    secrets below /etc/prometheus: nothing else of upstream's busybox image is read."""
    name = prometheus_image_name()
    archive = image.binary_archive(
        "prometheus",
        name,
        [
            (prometheus.binary(PROMETHEUS_RELEASE, "prometheus"), "/bin/prometheus"),
            (CA_BUNDLE, CA_BUNDLE),
        ],
        entrypoint=["/bin/prometheus"],
        user="65534",
        description=f"Prometheus {prometheus_version()} from the Go module proxy "
        "(testbed/operator.py)",
        workdir="/prometheus",
        log=log,
    )
    return name, archive


def kubectl(kubeconfig, *args, input=None, check=True):
    """The test control plane's kubectl (.ci/setup.d/40-kubernetes.sh) on `kubeconfig`."""
    result = subprocess.run(
        [builds.kube_binary("kubectl"), "--kubeconfig", str(kubeconfig), *args],
        input=input,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    if check and result.returncode:
        raise AssertionError(
            f"kubectl {' '.join(args)}: {result.returncode}\n{result.stdout}\n{result.stderr}"
        )
    return result


def apply(kubeconfig, objs, check=True):
    """`kubectl apply --server-side` of objects (dicts); field validation is Strict."""
    return kubectl(
        kubeconfig,
        "apply",
        "--server-side",
        "--field-manager=kse-tests",
        "-f",
        "-",
        input=yaml.safe_dump_all(objs),
        check=check,
    )


def apply_crds(kubeconfig):
    """The release's CRDs, server-side (the Prometheus CRD is too big for the annotation a
    client-side apply writes), then each one Established."""
    crds = str(crd_dir())
    kubectl(kubeconfig, "apply", "--server-side", "--field-manager=kse-tests", "-f", crds)
    kubectl(kubeconfig, "wait", "--for=condition=Established", "--timeout=60s", "-f", crds)


def operator_argv(port: int, namespaces=()) -> list[str]:
    argv = [
        binary("operator"),
        f"--web.listen-address=127.0.0.1:{port}",
        f"--prometheus-config-reloader={reloader_image_name()}",
        "--log-format=logfmt",
    ]
    if namespaces:
        argv.append("--namespaces=" + ",".join(namespaces))
    return argv


class Operator:
    """A running operator: its process, web port and log."""

    def __init__(self, proc: Proc, port: int):
        self.proc = proc
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def stop(self):
        self.proc.stop()


def start_operator(kubeconfig, log_dir, namespaces=()) -> Operator:
    """The operator on the host against `kubeconfig`, limited to `namespaces` (all when
    empty); waits until its web server listens."""
    port = free_port()
    log = pathlib.Path(log_dir) / "prometheus-operator.log"
    env = dict(os.environ, KUBECONFIG=str(kubeconfig))
    proc = Proc(operator_argv(port, namespaces), log, env=env)
    try:
        wait_for_port(port, timeout=60, proc=proc)
    except BaseException:
        proc.stop()
        raise
    return Operator(proc, port)


@contextlib.contextmanager
def running_operator(kubeconfig, log_dir, namespaces=()):
    op = start_operator(kubeconfig, log_dir, namespaces)
    try:
        yield op
    finally:
        op.stop()


def prometheus_objects(
    image_name=None,
    version_tag=None,
    namespace=NAMESPACE,
    name=NAME,
    target_namespace=TARGET_NAMESPACE,
    interval="5s",
) -> list[dict]:
    """A kube-prometheus-like Prometheus for deploy/: its namespace and ServiceAccount,
    discovery rights in the exporter's namespace, the metrics-reader ClusterRole of
    deploy/components/kube-rbac bound to it, and the Prometheus CR selecting our
    ServiceMonitors and PrometheusRule by their app label, scraping and evaluating every
    `interval` (the ServiceMonitors' own 30 s wins for their endpoints)."""
    ns_selector = {"matchLabels": {"kubernetes.io/metadata.name": target_namespace}}
    app_selector = {"matchLabels": dict(APP_LABEL)}
    account = {"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": namespace}
    discovery = f"{SERVICE_ACCOUNT}-discovery"
    return [
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}},
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": SERVICE_ACCOUNT, "namespace": namespace},
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": {"name": discovery, "namespace": target_namespace},
            "rules": [
                {
                    "apiGroups": [""],
                    "resources": ["services", "endpoints", "pods"],
                    "verbs": ["get", "list", "watch"],
                },
                {
                    "apiGroups": ["discovery.k8s.io"],
                    "resources": ["endpointslices"],
                    "verbs": ["get", "list", "watch"],
                },
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": {"name": discovery, "namespace": target_namespace},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": discovery},
            "subjects": [account],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRoleBinding",
            "metadata": {"name": f"{SERVICE_ACCOUNT}-kube-scale-exporter"},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": METRICS_READER,
            },
            "subjects": [account],
        },
        {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "Prometheus",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "image": image_name or prometheus_image_name(),
                "version": version_tag or prometheus_version(),
                "replicas": 1,
                "serviceAccountName": SERVICE_ACCOUNT,
                "serviceMonitorSelector": app_selector,
                "serviceMonitorNamespaceSelector": ns_selector,
                "ruleSelector": app_selector,
                "ruleNamespaceSelector": ns_selector,
                "scrapeInterval": interval,
                "scrapeTimeout": interval,
                "evaluationInterval": interval,
            },
        },
    ]


def _get(kubeconfig, kind, name, namespace):
    result = kubectl(kubeconfig, "-n", namespace, "get", kind, name, "-o", "json", check=False)
    if result.returncode:
        if "NotFound" in result.stderr:
            return None
        raise AssertionError(f"kubectl get {kind} {name}: {result.stderr}")
    return json.loads(result.stdout)


def generated_config_gz(kubeconfig, namespace=NAMESPACE, name=NAME) -> bytes | None:
    """The Prometheus configuration the operator generated, as it wrote it (Secret
    prometheus-NAME, key prometheus.yaml.gz, gzipped), or None while there is none."""
    secret = _get(kubeconfig, "secret", f"prometheus-{name}", namespace)
    data = (secret or {}).get("data", {}).get("prometheus.yaml.gz")
    return base64.b64decode(data) if data else None


def generated_config(kubeconfig, namespace=NAMESPACE, name=NAME) -> dict | None:
    """generated_config_gz's configuration, parsed."""
    data = generated_config_gz(kubeconfig, namespace, name)
    return yaml.safe_load(gzip.decompress(data)) if data else None


def rule_files(kubeconfig, namespace=NAMESPACE, name=NAME) -> dict[str, dict]:
    """Every rule file the operator generated ({file name: its YAML}), from its
    ConfigMaps prometheus-NAME-rulefiles-0, -1, ..."""
    out = {}
    index = 0
    while cm := _get(kubeconfig, "configmap", f"prometheus-{name}-rulefiles-{index}", namespace):
        out.update({key: yaml.safe_load(text) for key, text in cm.get("data", {}).items()})
        index += 1
    return out


def main(argv):
    if argv[:1] == ["images"]:
        for name, archive in (reloader_image(), prometheus_image()):
            print(name, archive)
        return 0
    if argv[:1] == ["version"]:
        print(version())
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
