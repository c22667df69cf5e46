"""The chart's tuning values (those of prometheus-community's node-exporter and
kube-state-metrics charts, where ours has the same part), rendered by the real Helm: each
one changes what it names and nothing else, the defaults render deploy/'s install
(test_chart.py), and the schema refuses a typo or a wrong type in each, naming it."""

import json
import os
import tempfile
from pathlib import Path

import pytest
import yaml

from testbed import helm
from testbed.kustomize import render
from tools import helm_chart

pytestmark = pytest.mark.integration

NODE, ETCD, CLUSTER = (f"kube-scale-exporter-{n}" for n in ("node", "etcd-node", "cluster"))
WORKLOADS = {"node": (NODE, ETCD), "cluster": (CLUSTER,)}


def workloads(objs):
    return {o["metadata"]["name"]: o for o in objs if o["kind"] in ("DaemonSet", "Deployment")}


def pod(objs, name):
    return workloads(objs)[name]["spec"]["template"]["spec"]


def container(objs, name):
    [c] = pod(objs, name)["containers"]
    return c


def canonical(objs):
    return sorted(json.dumps(o, sort_keys=True) for o in objs)


@pytest.fixture(scope="module")
def default():
    return helm.template({})


def changed(default, objs):
    """The objects that differ from the default render, by kind and name."""
    before = {(o["kind"], o["metadata"]["name"]): o for o in default}
    return {
        (o["kind"], o["metadata"]["name"])
        for o in objs
        if before.get((o["kind"], o["metadata"]["name"])) != o
    } | (set(before) - {(o["kind"], o["metadata"]["name"]) for o in objs})


# --- the image ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "image, expected",
    [
        ({}, f"kube-scale-exporter:{helm_chart.__version__}"),
        (
            {"registry": "registry.example.com:5000"},
            "registry.example.com:5000/kube-scale-exporter",
        ),
        ({"repository": "team/kse", "tag": "1.2.3"}, "team/kse:1.2.3"),
        ({"digest": "sha256:" + "a" * 64}, "kube-scale-exporter@sha256:" + "a" * 64),
    ],
)
def test_the_image_reference_is_built_from_registry_repository_tag_or_digest(image, expected):
    objs = helm.template({"image": image})
    for name in workloads(objs):
        ref = container(objs, name)["image"]
        assert ref == expected or ref == f"{expected}:{helm_chart.__version__}", (name, ref)


def test_pull_policy_and_pull_secrets_on_every_pod(default):
    for name in workloads(default):
        assert container(default, name)["imagePullPolicy"] == "IfNotPresent"
        assert "imagePullSecrets" not in pod(default, name)
    objs = helm.template({"image": {"pullPolicy": "Always"}, "imagePullSecrets": [{"name": "r"}]})
    for name in workloads(objs):
        assert container(objs, name)["imagePullPolicy"] == "Always"
        assert pod(objs, name)["imagePullSecrets"] == [{"name": "r"}]
    assert changed(default, objs) == {
        ("DaemonSet", NODE),
        ("DaemonSet", ETCD),
        ("Deployment", CLUSTER),
    }


# --- each workload's values --------------------------------------------------------------


@pytest.mark.parametrize("mode", ["node", "cluster"])
def test_resources_merge_into_the_defaults_per_workload(default, mode):
    objs = helm.template({mode: {"resources": {"limits": {"memory": "300Mi"}}}})
    for name in WORKLOADS[mode]:
        before, after = container(default, name)["resources"], container(objs, name)["resources"]
        assert after == {**before, "limits": {**before["limits"], "memory": "300Mi"}}
    assert {n for _, n in changed(default, objs)} == set(WORKLOADS[mode])


@pytest.mark.parametrize("mode", ["node", "cluster"])
def test_pod_labels_annotations_priority_and_extra_args(default, mode):
    values = {
        "podLabels": {"team": "platform"},
        "podAnnotations": {"example.com/owner": "platform"},
        "priorityClassName": "fleet-critical",
        "extraArgs": ["--web.kube-rbac.cache-ttl=5m", "--log.level=debug"],
    }
    objs = helm.template({mode: values})
    for name in WORKLOADS[mode]:
        template = workloads(objs)[name]["spec"]["template"]
        labels = template["metadata"]["labels"]
        assert labels == {
            **workloads(default)[name]["spec"]["template"]["metadata"]["labels"],
            "team": "platform",
        }
        assert template["metadata"]["annotations"] == values["podAnnotations"]
        assert template["spec"]["priorityClassName"] == "fleet-critical"
        args, before = container(objs, name)["args"], container(default, name)["args"]
        assert args == before + values["extraArgs"]  # last: they override the chart's flags
    assert {n for _, n in changed(default, objs)} == set(WORKLOADS[mode])


def test_default_priority_classes(default):
    assert pod(default, NODE)["priorityClassName"] == "system-node-critical"
    assert pod(default, ETCD)["priorityClassName"] == "system-node-critical"
    assert "priorityClassName" not in pod(default, CLUSTER)


def test_node_placement_values_place_the_node_daemonset_and_leave_the_etcd_ones(default):
    values = {
        "nodeSelector": {"nvidia.com/gpu.present": "true"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["gpu"]}]}
                    ]
                }
            }
        },
    }
    objs = helm.template({"node": values})
    # Helm merges a map into the default's: the node selector keeps kubernetes.io/os.
    values["nodeSelector"] = {**pod(default, NODE)["nodeSelector"], **values["nodeSelector"]}
    for key, value in values.items():
        assert pod(objs, NODE)[key] == value, key
    # The etcd DaemonSet keeps deploy/'s placement: kubeadm's control-plane nodes, any taint.
    assert pod(objs, ETCD) == pod(default, ETCD)
    assert changed(default, objs) == {("DaemonSet", NODE)}


def test_without_an_affinity_set_the_node_daemonset_keeps_off_the_etcd_nodes(default):
    term = {"key": "node-role.kubernetes.io/control-plane", "operator": "DoesNotExist"}
    required = pod(default, NODE)["affinity"]["nodeAffinity"]
    terms = required["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms == [{"matchExpressions": [term]}]
    off = helm.template({"collectors": {"etcdNode": "off"}})
    assert "affinity" not in pod(off, NODE)
    mine = {"podAntiAffinity": {}}
    assert (
        pod(helm.template({"collectors": {"etcdNode": "off"}, "node": {"affinity": mine}}), NODE)[
            "affinity"
        ]
        == mine
    )


def test_cluster_placement_values(default):
    values = {
        "nodeSelector": {"pool": "system"},
        "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "system"}],
        "affinity": {"podAntiAffinity": {}},
    }
    assert "tolerations" not in pod(default, CLUSTER) and "affinity" not in pod(default, CLUSTER)
    objs = helm.template({"cluster": values})
    values["nodeSelector"] = {"kubernetes.io/os": "linux", "pool": "system"}
    for key, value in values.items():
        assert pod(objs, CLUSTER)[key] == value
    assert changed(default, objs) == {("Deployment", CLUSTER)}


def test_update_strategies(default):
    for name in (NODE, ETCD):
        assert workloads(default)[name]["spec"]["updateStrategy"]["rollingUpdate"] == {
            "maxUnavailable": "10%"
        }
    assert workloads(default)[CLUSTER]["spec"]["strategy"] == {"type": "Recreate"}
    objs = helm.template(
        {
            "node": {"updateStrategy": {"rollingUpdate": {"maxUnavailable": "25%"}}},
            "cluster": {
                "updateStrategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0}}
            },
        }
    )
    for name in (NODE, ETCD):
        assert workloads(objs)[name]["spec"]["updateStrategy"] == {
            "type": "RollingUpdate",
            "rollingUpdate": {"maxUnavailable": "25%"},
        }
    # Recreate takes no rollingUpdate: the user's type replaces it (Helm merges maps).
    assert workloads(objs)[CLUSTER]["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxSurge": 0},
    }


# --- ServiceAccounts and RBAC ------------------------------------------------------------


def test_service_accounts_created_named_and_annotated(default):
    objs = helm.template(
        {
            "node": {"serviceAccount": {"annotations": {"eks.amazonaws.com/role-arn": "arn:x"}}},
            "cluster": {"serviceAccount": {"create": False, "name": "mine"}},
        }
    )
    accounts = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ServiceAccount"}
    assert set(accounts) == {"kube-scale-exporter-node"}
    assert accounts["kube-scale-exporter-node"]["metadata"]["annotations"] == {
        "eks.amazonaws.com/role-arn": "arn:x"
    }
    assert pod(objs, CLUSTER)["serviceAccountName"] == "mine"
    assert pod(objs, NODE)["serviceAccountName"] == "kube-scale-exporter-node"
    bindings = {o["metadata"]["name"]: o for o in objs if o["kind"] == "ClusterRoleBinding"}
    assert bindings[CLUSTER]["subjects"] == [
        {"kind": "ServiceAccount", "name": "mine", "namespace": helm_chart.NAMESPACE}
    ]
    renamed = helm.template({"node": {"serviceAccount": {"name": "kse-node"}}})
    assert {o["metadata"]["name"] for o in renamed if o["kind"] == "ServiceAccount"} == {
        "kse-node",
        "kube-scale-exporter-cluster",
    }
    for name in (NODE, ETCD):
        assert pod(renamed, name)["serviceAccountName"] == "kse-node"


def test_rbac_create_false_leaves_out_the_cluster_roles_and_bindings_only(default):
    objs = helm.template({"rbac": {"create": False}})
    rbac = {"ClusterRole", "ClusterRoleBinding"}
    assert canonical(objs) == canonical([o for o in default if o["kind"] not in rbac])
    assert any(o["kind"] in rbac for o in default)


# --- ServiceMonitors ---------------------------------------------------------------------


def test_service_monitor_interval_timeout_and_relabelings(default):
    relabel = {"action": "replace", "targetLabel": "cluster", "replacement": "gpu-east"}
    drop = {"action": "drop", "sourceLabels": ["__name__"], "regex": "kubescale_etcd_keys"}
    objs = helm.template(
        {
            "serviceMonitors": {
                "interval": "1m",
                "scrapeTimeout": "20s",
                "relabelings": [relabel],
                "metricRelabelings": [drop],
            }
        }
    )
    before = {o["metadata"]["name"]: o for o in default if o["kind"] == "ServiceMonitor"}
    monitors = [o for o in objs if o["kind"] == "ServiceMonitor"]
    assert len(monitors) == len(before) == 3
    for monitor in monitors:
        [endpoint] = monitor["spec"]["endpoints"]
        [was] = before[monitor["metadata"]["name"]]["spec"]["endpoints"]
        assert (was["interval"], was["scrapeTimeout"]) == ("30s", "10s")
        assert (endpoint["interval"], endpoint["scrapeTimeout"]) == ("1m", "20s")
        assert endpoint["relabelings"] == was["relabelings"] + [relabel]
        assert endpoint["metricRelabelings"] == [drop] and "metricRelabelings" not in was
    assert {k for k, _ in changed(default, objs)} == {"ServiceMonitor"}


# --- host paths --------------------------------------------------------------------------


def volumes(objs, name):
    return {v["name"]: v for v in pod(objs, name).get("volumes", [])}


def mounts(objs, name):
    return {m["name"]: m for m in container(objs, name).get("volumeMounts", [])}


def test_containerd_host_paths_move_the_host_side_only(default):
    paths = {
        "containerdConfig": "/etc/k8s-containerd",
        "containerdIngest": "/data/containerd/io.containerd.content.v1.content/ingest",
    }
    objs = helm.template({"hostPaths": paths})
    for name in (NODE, ETCD):
        assert (
            volumes(objs, name)["containerd-config"]["hostPath"]["path"]
            == paths["containerdConfig"]
        )
        assert (
            volumes(objs, name)["containerd-ingest"]["hostPath"]["path"]
            == paths["containerdIngest"]
        )
        assert mounts(objs, name) == mounts(default, name)  # where the collector looks
    socket = helm.template(
        {
            "collectors": {"imagepull": "socket"},
            "hostPaths": {"containerdSocket": "/run/k3s/containerd/containerd.sock"},
        }
    )
    assert volumes(socket, NODE)["containerd-socket"]["hostPath"] == {
        "path": "/run/k3s/containerd/containerd.sock",
        "type": "Socket",
    }


def test_kubelet_config_default_is_the_file_elsewhere_its_directory_and_the_flag(default):
    for name in (NODE, ETCD):
        assert volumes(default, name)["kubelet-config"]["hostPath"] == {
            "path": "/var/lib/kubelet/config.yaml",
            "type": "File",
        }
        assert (
            mounts(default, name)["kubelet-config"]["mountPath"] == "/var/lib/kubelet/config.yaml"
        )
        assert not any(
            a.startswith("--kubelet.config-file") for a in container(default, name)["args"]
        )
    eks = "/etc/kubernetes/kubelet/config.json"
    objs = helm.template({"hostPaths": {"kubeletConfig": eks}})
    for name in (NODE, ETCD):
        # A directory mount: a node without the file still starts the pod (never
        # ContainerCreating), and the collector reports the file missing.
        assert volumes(objs, name)["kubelet-config"]["hostPath"] == {
            "path": "/etc/kubernetes/kubelet",
            "type": "Directory",
        }
        assert mounts(objs, name)["kubelet-config"] == {
            "mountPath": "/etc/kubernetes/kubelet",
            "name": "kubelet-config",
            "readOnly": True,
        }
        assert f"--kubelet.config-file={eks}" in container(objs, name)["args"]
    off = helm.template({"collectors": {"imagepull": "off"}, "hostPaths": {"kubeletConfig": eks}})
    assert not any("kubelet" in a for a in container(off, NODE)["args"])


# --- dashboards --------------------------------------------------------------------------


def dashboards(objs):
    return {o["metadata"]["name"]: o for o in objs if o["kind"] == "ConfigMap"}


def test_dashboards_configmaps_are_off_by_default_and_deploys_component_when_on(default):
    assert dashboards(default) == {}
    objs = helm.template({"grafanaDashboards": {"enabled": True}})
    ours = dashboards(objs)
    assert len(ours) == len(list(helm_chart.DASHBOARDS.glob("*.json"))) >= 4
    for cm in ours.values():
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        [(key, text)] = cm["data"].items()
        assert text == (helm_chart.DASHBOARDS / key).read_text()  # the dashboard, as generated
        assert json.loads(text)["uid"]
    assert canonical(ours.values()) == canonical(dashboards(component_render()).values())


def component_render():
    """deploy/components/grafana-dashboards on deploy/base, in the chart's namespace."""
    return render_with(["grafana-dashboards"])


def render_with(components):
    with tempfile.TemporaryDirectory() as tmp:
        rel = lambda p: os.path.relpath(p, tmp)  # noqa: E731
        doc = {
            "resources": [rel(helm_chart.DEPLOY / "base")],
            "components": [rel(helm_chart.COMPONENTS / c) for c in components],
            "namespace": helm_chart.NAMESPACE,
        }
        Path(tmp, "kustomization.yaml").write_text(yaml.safe_dump(doc))
        return render(tmp)


def test_dashboards_label_namespace_and_annotations_are_values():
    objs = helm.template(
        {
            "grafanaDashboards": {
                "enabled": True,
                "label": "my_dashboards",
                "labelValue": "kse",
                "namespace": "monitoring",
                "annotations": {"grafana_folder": "Kubernetes scale"},
            }
        }
    )
    for cm in dashboards(objs).values():
        assert cm["metadata"]["namespace"] == "monitoring"
        assert cm["metadata"]["labels"] == {
            "app.kubernetes.io/name": "kube-scale-exporter",
            "my_dashboards": "kse",
        }
        assert cm["metadata"]["annotations"] == {"grafana_folder": "Kubernetes scale"}


def test_dashboards_have_one_source():
    """The chart's copies and deploy/'s ConfigMaps are dashboards/ as generated: the copies
    are written by `make generate` (a stale one fails `make check-generated`), and
    dashboards/kustomization.yaml lists every dashboard."""
    generated = sorted(p.name for p in helm_chart.DASHBOARDS.glob("*.json"))
    copies = {p.name: p.read_text() for p in (helm_chart.CHART / "dashboards").glob("*.json")}
    assert sorted(copies) == generated
    for name, text in copies.items():
        assert text == (helm_chart.DASHBOARDS / name).read_text(), name
    listed = yaml.safe_load((helm_chart.DASHBOARDS / "kustomization.yaml").read_text())
    assert sorted(f for g in listed["configMapGenerator"] for f in g["files"]) == generated


# --- bad input: the schema ---------------------------------------------------------------


@pytest.mark.parametrize(
    "values, named",
    [
        ({"image": {"registy": "r.example.com"}}, "registy"),
        ({"image": {"pullPolicy": "Sometimes"}}, "pullPolicy"),
        ({"image": {"digest": "latest"}}, "digest"),
        ({"imagePullSecrets": ["regcred"]}, "imagePullSecrets"),
        ({"imagePullSecrets": [{"nme": "regcred"}]}, "nme"),
        ({"node": {"resource": {}}}, "resource"),
        ({"node": {"resources": {"limit": {"memory": "1Gi"}}}}, "limit"),
        ({"cluster": {"resources": {"limits": {"memory": True}}}}, "memory"),
        ({"node": {"tolerations": {"operator": "Exists"}}}, "tolerations"),
        ({"node": {"tolerations": [{"operator": "Exist"}]}}, "operator"),
        ({"node": {"tolerations": [{"efect": "NoSchedule"}]}}, "efect"),
        ({"node": {"nodeSelector": {"pool": 1}}}, "pool"),
        ({"cluster": {"affinity": {"nodeAfinity": {}}}}, "nodeAfinity"),
        ({"node": {"priorityClassName": 5}}, "priorityClassName"),
        ({"node": {"podLabels": ["a"]}}, "podLabels"),
        ({"cluster": {"podAnnotations": {"a": 1}}}, "podAnnotations"),
        ({"node": {"extraArgs": "--log.level=debug"}}, "extraArgs"),
        ({"node": {"extraArgs": ["log.level=debug"]}}, "extraArgs"),
        ({"node": {"updateStrategy": {"type": "Recreate"}}}, "type"),
        (
            {"cluster": {"updateStrategy": {"rollingUpdate": {"maxUnavaliable": 1}}}},
            "maxUnavaliable",
        ),
        ({"node": {"serviceAccount": {"create": "no"}}}, "create"),
        ({"cluster": {"serviceAcount": {}}}, "serviceAcount"),
        ({"rbac": {"create": "false"}}, "create"),
        ({"serviceMonitors": {"interval": "30"}}, "interval"),
        ({"serviceMonitors": {"scrapeTimout": "5s"}}, "scrapeTimout"),
        ({"serviceMonitors": {"relabelings": [{"target_label": "x"}]}}, "target_label"),
        ({"serviceMonitors": {"metricRelabelings": [{"action": "delete"}]}}, "action"),
        ({"hostPaths": {"kubeletConfig": "config.yaml"}}, "kubeletConfig"),
        ({"hostPaths": {"kubeletConfig": "/config.yaml"}}, "kubeletConfig"),
        ({"hostPaths": {"containerdConfg": "/etc/containerd"}}, "containerdConfg"),
        ({"hostPaths": {"containerdIngest": 1}}, "containerdIngest"),
        ({"grafanaDashboards": {"enabled": "true"}}, "enabled"),
        ({"grafanaDashboards": {"lable": "x"}}, "lable"),
        ({"grafanaDashboards": {"annotations": {"grafana_folder": 1}}}, "grafana_folder"),
    ],
)
def test_a_typo_or_wrong_type_in_a_tuning_value_fails_naming_it(values, named):
    result = helm.template(values, check=False)
    assert result.returncode != 0 and result.stdout == ""
    assert "values don't meet the specifications of the schema" in result.stderr
    assert named in result.stderr, result.stderr
