"""charts/kube-scale-exporter, rendered by the real Helm: for every combination of the
values that pick collectors it sends what kustomize renders for the matching components of
deploy/ (its one source), grants what the collectors declare and no more, and refuses a
values file with a key or type it does not know, naming it."""

import itertools
import json
from concurrent.futures import ThreadPoolExecutor

import pytest

from testbed import helm
from testbed.kustomize import render
from tests.deploy.test_least_privilege import escalations
from tests.deploy import test_manifests as kustomize_checks
from tests.deploy.test_manifests import by_kind, declared_rules, merged, pods, role_of
from tools import helm_chart

# One worker runs them all: chart_renders (every combination through helm: 46 s) is made
# once per worker that needs it.
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("helm-chart")]

NAMESPACE = helm_chart.NAMESPACE
# Every assignment of the values that pick components (docs/deploy.md's table): 144.
COMBOS = [
    dict(zip((c.path for c in helm_chart.CHOICES), values, strict=True))
    for values in itertools.product(*(list(c.components) for c in helm_chart.CHOICES))
]


def combo_id(combo):
    return ",".join(
        f"{k.split('.')[-2 if k.endswith('enabled') else -1]}={v}" for k, v in combo.items()
    )


def in_parallel(fn, items):
    with ThreadPoolExecutor(max_workers=2) as pool:
        return list(pool.map(fn, items))


@pytest.fixture(scope="session")
def chart_renders():
    """{combo id: what helm renders}, the mode and monitoring switches at their defaults."""
    objs = in_parallel(lambda c: helm.template(helm_chart.nested(c)), COMBOS)
    return {combo_id(c): o for c, o in zip(COMBOS, objs, strict=True)}


def canonical(objs):
    return sorted((json.dumps(o, sort_keys=True) for o in objs))


def test_every_combination_renders_what_kustomize_renders_for_its_components(chart_renders):
    kustomized = in_parallel(helm_chart.render_combo, COMBOS)
    differ = [
        combo_id(c)
        for c, k in zip(COMBOS, kustomized, strict=True)
        if canonical(chart_renders[combo_id(c)]) != canonical(k)
    ]
    assert differ == []


def test_the_default_values_render_the_default_install():
    from_kustomize = [o for o in render(helm_chart.DEPLOY) if o["kind"] != "Namespace"]
    assert canonical(helm.template({})) == canonical(from_kustomize)


def test_in_another_namespace_every_object_and_binding_moves():
    objs = helm.template({}, namespace="monitoring")
    for obj in objs:
        if obj["kind"] not in ("ClusterRole", "ClusterRoleBinding"):
            assert obj["metadata"]["namespace"] == "monitoring", obj["metadata"]["name"]
    for binding in by_kind(objs, "ClusterRoleBinding"):
        assert [s["namespace"] for s in binding["subjects"]] == ["monitoring"]


@pytest.mark.parametrize("combo", [combo_id(c) for c in COMBOS])
def test_rbac_is_what_the_collectors_declare(chart_renders, combo):
    objs = chart_renders[combo]
    accounts = {sa["metadata"]["name"]: sa for sa in by_kind(objs, "ServiceAccount")}
    assert set(accounts) == {"kube-scale-exporter-node", "kube-scale-exporter-cluster"}
    for account, sa in accounts.items():
        granted = merged(role_of(objs, account))
        assert granted == merged(declared_rules(objs, account)), account
        assert sa["automountServiceAccountToken"] is bool(granted), account
        for name, pod in pods(objs).items():
            if pod["serviceAccountName"] == account:
                assert pod["automountServiceAccountToken"] is bool(granted), name
    kustomize_checks.test_rbac_is_read_only_and_never_secrets_or_node_proxy({combo: objs}, combo)


@pytest.mark.parametrize("combo", [combo_id(c) for c in COMBOS])
def test_only_the_opt_in_values_give_a_pod_root_on_its_node(chart_renders, combo):
    objs = chart_renders[combo]
    for name, pod in pods(objs).items():
        # The socket source (supplementalGroups 0) and etcd-node-full's owner of the key
        # (uid and gid 0): the two opt-ins deploy/ names as what they cost.
        opt_in = "imagepull=socket" in combo and "node" in name
        opt_in |= "etcdNode=full" in combo and name.endswith("-etcd-node")
        assert bool(escalations(pod)) is opt_in, (name, escalations(pod))
    # The kustomize test's own check: locked down, non-root but etcd-node-full's pod.
    install = "base+etcd-node-full" if "etcdNode=full" in combo else "default"
    kustomize_checks.test_every_pod_is_locked_down({install: objs}, install)


def component(obj):
    return obj["metadata"]["labels"].get("app.kubernetes.io/component")


@pytest.mark.parametrize(
    "values, removed",
    [
        ({"node": {"enabled": False}}, lambda o: component(o) == "node"),
        ({"cluster": {"enabled": False}}, lambda o: component(o) == "cluster"),
        ({"serviceMonitors": {"enabled": False}}, lambda o: o["kind"] == "ServiceMonitor"),
        ({"prometheusRule": {"enabled": False}}, lambda o: o["kind"] == "PrometheusRule"),
    ],
)
def test_each_switch_leaves_out_its_objects_and_only_those(values, removed):
    default = helm.template({})
    assert any(removed(o) for o in default)
    assert canonical(helm.template(values)) == canonical([o for o in default if not removed(o)])


def test_the_image_and_balloon_selector_come_from_values():
    objs = helm.template(
        {
            "image": {"repository": "registry.example.com/kse", "tag": "9.9"},
            "collectors": {"balloon": {"selector": "app=balloon"}},
        }
    )
    for name, pod in pods(objs).items():
        assert pod["containers"][0]["image"] == "registry.example.com/kse:9.9", name
    [cluster] = pods(objs)["kube-scale-exporter-cluster"]["containers"]
    assert "--balloon.selector=app=balloon" in cluster["args"]


def test_monitoring_labels_go_on_the_monitoring_objects_only():
    labels = {"release": "kube-prometheus-stack"}
    objs = helm.template({helm_chart.EXTRA_LABELS: labels})
    for obj in objs:
        mine = obj["metadata"]["labels"]
        if obj["kind"] in ("ServiceMonitor", "PrometheusRule"):
            assert mine == {**mine, **labels} and "app.kubernetes.io/name" in mine
        else:
            assert "release" not in mine, obj["metadata"]["name"]
    assert canonical(helm.template({helm_chart.EXTRA_LABELS: {}})) == canonical(helm.template({}))


def test_helm_lint_is_clean():
    out = helm.helm("lint", "--strict", str(helm.CHART))
    assert "0 chart(s) failed" in out.stdout
    assert "[WARNING]" not in out.stdout and "[ERROR]" not in out.stdout, out.stdout


# --- bad input: the values schema ------------------------------------------------------------


@pytest.mark.parametrize(
    "values, named",
    [
        ({"imagee": {"tag": "1"}}, "imagee"),
        ({"collectors": {"balloon": {"enabled": True, "selectr": "a=b"}}}, "selectr"),
        ({"kubeRbac": {"enabled": "yes"}}, "kubeRbac"),
        ({"collectors": {"etcdNode": "on"}}, "etcdNode"),
        ({"collectors": {"imagepull": True}}, "imagepull"),
        ({"image": {"tag": 1.0}}, "tag"),
        ({"webConfig": {"secretName": ""}}, "secretName"),
        ({"monitoringLabels": {"release": 1}}, "release"),
    ],
)
def test_an_unknown_key_or_wrong_type_fails_naming_it(values, named):
    result = helm.template(values, check=False)
    assert result.returncode != 0 and result.stdout == ""
    assert "values don't meet the specifications of the schema" in result.stderr
    assert named in result.stderr, result.stderr
