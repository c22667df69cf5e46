"""What charts/kube-scale-exporter renders, validated by kubeconform against the API schemas
of Kubernetes 1.37 and 1.35 as their real kube-apiservers serve them (/openapi/v2, with
prometheus-operator's CRDs installed for the ServiceMonitors and the PrometheusRule): the
default values, every value tuned, every collector choice on and off. The schemas are
written here from the servers (testbed/api_schemas.py): kubeconform downloads nothing."""

import subprocess
import time

import pytest
import yaml

from testbed import api_schemas, builds, helm, operator
from testbed.kube_apiserver import apiserver_on_new_etcd

pytestmark = pytest.mark.integration

CRD_KINDS = {"com.coreos.monitoring.v1.ServiceMonitor", "com.coreos.monitoring.v1.PrometheusRule"}
TUNED = {
    "image": {
        "registry": "registry.example.com",
        "repository": "platform/kube-scale-exporter",
        "digest": "sha256:" + "0" * 64,
        "pullPolicy": "Always",
    },
    "imagePullSecrets": [{"name": "regcred"}],
    "node": {
        "resources": {"requests": {"cpu": 0.05, "memory": "64Mi"}, "limits": {"memory": 256}},
        "nodeSelector": {"pool": "gpu"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {"podAntiAffinity": {}},
        "priorityClassName": "fleet",
        "podLabels": {"team": "platform"},
        "podAnnotations": {"example.com/a": "b"},
        "extraArgs": ["--image-pull.stall-after=5m"],
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 100}},
        "serviceAccount": {"name": "kse-node", "annotations": {"example.com/role": "x"}},
    },
    "cluster": {
        "resources": {"limits": {"memory": "2Gi"}},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "system"}],
        "affinity": {"nodeAffinity": {}},
        "priorityClassName": "system-cluster-critical",
        "extraArgs": ["--web.kube-rbac.cache-ttl=5m"],
        "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1}},
    },
    "hostPaths": {"kubeletConfig": "/etc/kubernetes/kubelet/config.json"},
    "serviceMonitors": {
        "interval": "1m",
        "scrapeTimeout": "15s",
        "relabelings": [{"action": "replace", "targetLabel": "cluster", "replacement": "a"}],
        "metricRelabelings": [{"action": "drop", "sourceLabels": ["__name__"], "regex": "x"}],
    },
    "monitoringLabels": {"release": "kube-prometheus-stack"},
    "grafanaDashboards": {"enabled": True, "annotations": {"grafana_folder": "Scale"}},
}
# The collectors switched by `enabled` (the others take a mode).
SWITCHED = ("balloon", "imagepullEvents", "capacityBuffer")


def collectors(etcd_node, imagepull, enabled):
    return {
        "etcdNode": etcd_node,
        "imagepull": imagepull,
        **{name: {"enabled": enabled} for name in SWITCHED},
    }


ALL_ON = {
    "collectors": collectors("full", "socket", True),
    "webConfig": {"enabled": True},
    "grafanaDashboards": {"enabled": True},
}
ALL_OFF = {"collectors": collectors("off", "off", False), "kubeRbac": {"enabled": False}}
RENDERS = {"default": {}, "tuned": TUNED, "all-on": ALL_ON, "all-off": ALL_OFF}


@pytest.fixture(scope="module")
def renders():
    return {name: helm.template(values) for name, values in RENDERS.items()}


@pytest.fixture(scope="module", params=sorted(builds.KUBE_RELEASES))
def schemas(request, renders, tmp_path_factory):
    """(Kubernetes version, the schema directory) of the release's real API server."""
    release = request.param
    tmp = tmp_path_factory.mktemp(f"api-{release}")
    wanted = {(o["apiVersion"], o["kind"]) for objs in renders.values() for o in objs}
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("KSE_KUBE_RELEASE", release)  # the binary the server below starts
        with apiserver_on_new_etcd(tmp / "server") as api:
            operator.apply_crds(api.write_kubeconfig(tmp / "kubeconfig"))
            openapi = served(api)
            version = api.admin.get("/version")["gitVersion"]
    api_schemas.write(openapi, tmp / "schemas", wanted)
    return version.removeprefix("v"), tmp / "schemas"


def served(api, timeout=60.0):
    """/openapi/v2 once it holds the CRDs' kinds (the aggregated document follows a CRD's
    establishment within seconds)."""
    deadline = time.monotonic() + timeout
    while True:
        doc = api.admin.get("/openapi/v2")
        if CRD_KINDS <= set(doc["definitions"]) or time.monotonic() > deadline:
            return doc
        time.sleep(1)


def kubeconform(version, directory, objs):
    return subprocess.run(
        [
            builds.kubeconform_binary(),
            "-strict",
            "-summary",
            "-output",
            "text",
            "-kubernetes-version",
            version,
            "-schema-location",
            str(directory / api_schemas.SCHEMA_LOCATION),
            "-",
        ],
        input=yaml.safe_dump_all(objs),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("render", sorted(RENDERS))
def test_the_chart_renders_valid_objects_for_the_api_server(schemas, renders, render):
    version, directory = schemas
    objs = renders[render]
    result = kubeconform(version, directory, objs)
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"Valid: {len(objs)}, Invalid: 0, Errors: 0" in result.stdout, result.stdout


@pytest.mark.parametrize(
    "mangle, named",
    [
        (
            lambda o: o["spec"]["template"]["spec"].update(tolerations={"operator": "Exists"}),
            "tolerations",
        ),
        (
            lambda o: o["spec"]["template"]["spec"]["containers"][0].update(
                imagePullPolicyy="Always"
            ),
            "imagePullPolicyy",
        ),
        (
            lambda o: o["spec"].update(
                updateStrategy={"type": "RollingUpdate", "rollingUpdat": {}}
            ),
            "rollingUpdat",
        ),
    ],
)
def test_kubeconform_refuses_what_the_api_server_would(schemas, renders, mangle, named):
    """The check can fail: a field the API does not have, or of the wrong type."""
    version, directory = schemas
    [daemonset] = [
        o
        for o in renders["default"]
        if (o["kind"], o["metadata"]["name"]) == ("DaemonSet", "kube-scale-exporter-node")
    ]
    broken = yaml.safe_load(yaml.safe_dump(daemonset))
    mangle(broken)
    result = kubeconform(version, directory, [broken])
    assert result.returncode == 1 and named in result.stdout, result.stdout
