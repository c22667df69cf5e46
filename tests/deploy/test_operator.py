"""deploy/'s ServiceMonitors and PrometheusRule through the real prometheus-operator.

The release's own CRDs on a real API server, deploy/ applied as kustomize renders it, the
operator (.ci/setup.d/44-prometheus-operator.sh) reconciling the kube-prometheus-like
Prometheus of testbed/operator.py: what it generates is what that Prometheus would load.
No kubelet runs here, so its StatefulSet's pods never start: scraping and alerting through
the operator is tests/e2e's part.
"""

import copy
import json
import pathlib
import re
import subprocess
import time

import pytest
import yaml

from testbed import operator
from testbed.kube_apiserver import apiserver_on_new_etcd
from tests.deploy.conftest import REPO
from tests.mixin.support import prometheus_binary

pytestmark = pytest.mark.integration

NAMESPACES = [operator.TARGET_NAMESPACE, operator.NAMESPACE]
RULES = pathlib.Path(REPO) / "rules"
# Relabel actions that change the labels a target keeps without a target_label.
LABEL_ACTIONS = {"labeldrop", "labelkeep", "labelmap"}


def snake(key: str) -> str:
    return re.sub(r"([A-Z])", lambda m: "_" + m.group(1).lower(), key)


def relabel_config(relabeling: dict) -> dict:
    """A ServiceMonitor relabeling as Prometheus' relabel_config spells it."""
    return {snake(k): v for k, v in relabeling.items()}


def wait_for(what, fn, timeout=90.0):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = fn()
        if value:
            return value
        time.sleep(0.5)
    raise TimeoutError(f"{what} after {timeout}s")


def service_monitors(manifests):
    return [m for m in manifests if m["kind"] == "ServiceMonitor"]


def job_name(mon, index=0):
    meta = mon["metadata"]
    return f"serviceMonitor/{meta['namespace']}/{meta['name']}/{index}"


@pytest.fixture(scope="module")
def kubeconfig(tmp_path_factory):
    """An API server of this module's own with the release's CRDs: the session's one
    (conftest.py) gets the stand-in CRDs of the other deploy tests."""
    workdir = tmp_path_factory.mktemp("operator-api")
    with apiserver_on_new_etcd(workdir) as api:
        path = api.write_kubeconfig(workdir / "admin")
        operator.apply_crds(path)
        yield path


@pytest.fixture(scope="module")
def applied(kubeconfig, manifests):
    """deploy/ as kustomize renders it, on the release's CRDs."""
    operator.apply(kubeconfig, manifests)
    return kubeconfig


@pytest.fixture(scope="module")
def reconciled(applied, manifests, tmp_path_factory):
    """The Prometheus applied beside deploy/, the operator started (and running until the
    module ends): its generated configuration and rule files, once every ServiceMonitor
    has a job."""
    kubeconfig = applied
    operator.apply(kubeconfig, operator.prometheus_objects())
    jobs = {job_name(m) for m in service_monitors(manifests)}
    log_dir = tmp_path_factory.mktemp("operator")
    with operator.running_operator(kubeconfig, log_dir, NAMESPACES) as op:

        def complete():
            config = operator.generated_config(kubeconfig)
            names = {j["job_name"] for j in (config or {}).get("scrape_configs", [])}
            return config if jobs <= names else None

        try:
            config = wait_for("a generated configuration with every job", complete)
            rules = wait_for("the generated rule files", lambda: operator.rule_files(kubeconfig))
        except TimeoutError as e:
            raise AssertionError(f"{e}\n{op.proc.log_tail()}") from None
        yield config, rules


@pytest.fixture(scope="module")
def jobs(reconciled):
    config, _ = reconciled
    return {j["job_name"]: j for j in config["scrape_configs"]}


def test_the_operator_is_the_release_go_mod_pins(capsys):
    """The binary the setup step built, stamped as the release stamps it; the line is
    printed whatever pytest captures, so every run says which operator it tested."""
    line = operator.version()
    with capsys.disabled():
        print(f"\n{line}")
    assert f"version {operator.release().removeprefix('v')} " in line, line


def test_every_service_monitor_becomes_one_job(manifests, jobs):
    expected = {
        job_name(m, i)
        for m in service_monitors(manifests)
        for i in range(len(m["spec"]["endpoints"]))
    }
    assert expected == set(jobs), sorted(jobs)


def test_each_job_scrapes_as_its_service_monitor_says(manifests, jobs):
    """Interval, timeout, scheme, sample limit, the kube-rbac token (Prometheus' own, from
    its pod) and no TLS client settings: the ServiceMonitors declare none."""
    for mon in service_monitors(manifests):
        [endpoint] = mon["spec"]["endpoints"]
        job = jobs[job_name(mon)]
        name = mon["metadata"]["name"]
        assert job["scrape_interval"] == endpoint["interval"], name
        assert job["scrape_timeout"] == endpoint["scrapeTimeout"], name
        assert job["scheme"] == endpoint["scheme"], name
        assert job.get("metrics_path", "/metrics") == "/metrics", name
        assert job["sample_limit"] == mon["spec"]["sampleLimit"], name
        assert job["bearer_token_file"] == endpoint["bearerTokenFile"], name
        assert "authorization" not in job and "basic_auth" not in job, name
        assert ("tls_config" in job) == ("tlsConfig" in endpoint), (name, job.get("tls_config"))
        [sd] = job["kubernetes_sd_configs"]
        assert sd["role"] == "endpoints", name
        assert sd["namespaces"]["names"] == [mon["metadata"]["namespace"]], name


def test_each_job_applies_the_service_monitor_s_relabelings_last(manifests, jobs):
    """Ours, unchanged and in their order, after the operator's own rules (which set the
    job, node, pod, container and endpoint labels that ours override or drop); after ours
    only rules on hidden labels (`__`, the operator's sharding), which a target loses."""
    for mon in service_monitors(manifests):
        [endpoint] = mon["spec"]["endpoints"]
        ours = [relabel_config(r) for r in endpoint["relabelings"]]
        relabel = jobs[job_name(mon)]["relabel_configs"]
        name = mon["metadata"]["name"]
        starts = [i for i in range(len(relabel)) if relabel[i : i + len(ours)] == ours]
        assert len(starts) == 1, (name, relabel)
        for rule in relabel[starts[0] + len(ours) :]:
            assert rule.get("action", "replace") not in LABEL_ACTIONS, (name, rule)
            assert rule.get("target_label", "__").startswith("__"), (name, rule)


def discovery_labels(service, port) -> dict:
    """The __meta_kubernetes_* labels Prometheus' endpoints role gives a target of this
    Service's port (the ones the operator's selection rules read)."""
    out = {"__meta_kubernetes_endpoint_port_name": port["name"]}
    for key, value in service["metadata"].get("labels", {}).items():
        label = re.sub(r"[^a-zA-Z0-9_]", "_", key)
        out[f"__meta_kubernetes_service_label_{label}"] = value
        out[f"__meta_kubernetes_service_labelpresent_{label}"] = "true"
    return out


# The discovery labels discovery_labels() gives; rules on any other label are left out.
SELECTION_LABELS = ("__meta_kubernetes_service_label", "__meta_kubernetes_endpoint_port_name")


def kept(labels: dict, relabel: list[dict]) -> bool:
    """Whether the job's keep and drop rules on those labels let the target through, as
    Prometheus applies them (a missing label is empty, values joined by the separator,
    the regex anchored)."""
    for rule in relabel:
        action = rule.get("action", "replace").lower()
        sources = rule.get("source_labels", [])
        if action not in ("keep", "drop") or not sources:
            continue
        if not all(s.startswith(SELECTION_LABELS) for s in sources):
            continue
        value = rule.get("separator", ";").join(labels.get(s, "") for s in sources)
        if (re.fullmatch(rule.get("regex", "(.*)"), value) is not None) != (action == "keep"):
            return False
    return True


def test_each_job_selects_its_own_service_and_no_other(manifests, jobs):
    """The operator's selection rules (from the selector and the port name) run on the
    discovery labels of every Service deploy/ makes: a job keeps the metrics port of the
    one Service its ServiceMonitor means, and nothing else."""
    services = [o for o in manifests if o["kind"] == "Service"]
    for mon in service_monitors(manifests):
        relabel = jobs[job_name(mon)]["relabel_configs"]
        selected = {
            (svc["metadata"]["name"], port["name"])
            for svc in services
            for port in svc["spec"]["ports"]
            if kept(discovery_labels(svc, port), relabel)
        }
        # The Service of the ServiceMonitor's name: the operator's job label is the
        # Service's name, which the mixin's rules select on.
        assert selected == {(mon["metadata"]["name"], "metrics")}, (
            mon["metadata"]["name"],
            selected,
        )


def test_the_prometheus_is_reconciled_onto_the_images_the_e2e_imports(reconciled, applied):
    """The StatefulSet runs Prometheus from the CR's image and the reloader the operator
    was told of, as the ServiceAccount bound to the metrics reader, its token mounted:
    the token the jobs send."""
    prom = operator.kubectl(
        applied, "-n", operator.NAMESPACE, "get", "prometheus", operator.NAME, "-o", "json"
    )
    conditions = {c["type"]: c["status"] for c in json.loads(prom.stdout)["status"]["conditions"]}
    assert conditions["Reconciled"] == "True", conditions
    sts = operator.kubectl(
        applied,
        "-n",
        operator.NAMESPACE,
        "get",
        "statefulset",
        f"prometheus-{operator.NAME}",
        "-o",
        "json",
    )
    pod = json.loads(sts.stdout)["spec"]["template"]["spec"]
    images = {c["name"]: c["image"] for c in pod["initContainers"] + pod["containers"]}
    assert images == {
        "init-config-reloader": operator.reloader_image_name(),
        "prometheus": operator.prometheus_image_name(),
        "config-reloader": operator.reloader_image_name(),
    }
    assert pod["serviceAccountName"] == operator.SERVICE_ACCOUNT
    assert pod.get("automountServiceAccountToken", True) is True


def test_prometheus_loads_the_generated_configuration(reconciled, applied, tmp_path):
    """What the pod's Prometheus loads: the Secret's file after the real reloader's
    substitution (as the init container runs it, with the pod's POD_NAME and SHARD),
    checked by the promtool of the image's Prometheus release (syntax only: the rule files
    and the token are the pod's)."""
    gz = tmp_path / "prometheus.yaml.gz"
    gz.write_bytes(operator.generated_config_gz(applied))
    out = tmp_path / "prometheus.env.yaml"
    subprocess.run(
        [
            operator.binary("prometheus-config-reloader"),
            "--watch-interval=0",
            "--listen-address=127.0.0.1:0",
            f"--config-file={gz}",
            f"--config-envsubst-file={out}",
        ],
        env={"POD_NAME": f"prometheus-{operator.NAME}-0", "SHARD": "0"},
        capture_output=True,
        timeout=60,
        check=True,
    )
    loaded = yaml.safe_load(out.read_text())
    assert (
        loaded["global"]["external_labels"]["prometheus_replica"] == f"prometheus-{operator.NAME}-0"
    )
    promtool = prometheus_binary(operator.PROMETHEUS_RELEASE, "promtool")
    result = subprocess.run(
        [promtool, "check", "config", "--syntax-only", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_a_prometheus_denying_file_access_takes_them_without_bearer_token_file(
    reconciled, applied, manifests
):
    """docs/deploy.md's recipe for a Prometheus with arbitraryFSAccessThroughSMs.deny: it
    skips our ServiceMonitors as they are (bearerTokenFile reads its filesystem) and takes
    them once an overlay removes bearerTokenFile, its default scrape class sending the same
    token. Copies under their own label, so the Prometheus `k8s` above selects none."""
    mons = service_monitors(manifests)
    [token] = {m["spec"]["endpoints"][0]["bearerTokenFile"] for m in mons}
    label = {"kse-test": "deny-file-access"}
    copies = []
    for mon in mons:
        for suffix in ("as-is", "classed"):
            c = copy.deepcopy(mon)
            c["metadata"]["name"] += f"-{suffix}"
            c["metadata"]["labels"] = label
            if suffix == "classed":
                del c["spec"]["endpoints"][0]["bearerTokenFile"]
            copies.append(c)
    [prometheus] = [
        o for o in operator.prometheus_objects(name="deny-file-access") if o["kind"] == "Prometheus"
    ]
    prometheus["spec"]["serviceMonitorSelector"] = {"matchLabels": label}
    prometheus["spec"]["arbitraryFSAccessThroughSMs"] = {"deny": True}
    prometheus["spec"]["scrapeClasses"] = [
        {"name": "pod-token", "default": True, "authorization": {"credentialsFile": token}}
    ]
    operator.apply(applied, [*copies, prometheus])
    classed = {job_name(c) for c in copies if c["metadata"]["name"].endswith("-classed")}

    def jobs_once_classed_ones_are_in():
        config = operator.generated_config(applied, name="deny-file-access") or {}
        jobs = {j["job_name"]: j for j in config.get("scrape_configs") or []}
        return jobs if classed <= set(jobs) else None

    jobs = wait_for("the deny-file-access Prometheus' jobs", jobs_once_classed_ones_are_in)
    assert set(jobs) == classed
    for job in jobs.values():
        assert job["authorization"] == {"type": "Bearer", "credentials_file": token}
        assert "bearer_token_file" not in job


def rule_file_of(rules, rule):
    meta = rule["metadata"]
    [key] = [k for k in rules if k.startswith(f"{meta['namespace']}-{meta['name']}-")]
    return rules[key]


def test_the_rule_file_is_the_prometheusrule_unchanged(manifests, reconciled, tmp_path):
    _, rules = reconciled
    [rule] = [o for o in manifests if o["kind"] == "PrometheusRule"]
    generated = rule_file_of(rules, rule)
    assert generated["groups"] == rule["spec"]["groups"]
    path = tmp_path / "rules.yaml"
    path.write_text(yaml.safe_dump(generated))
    result = subprocess.run(
        [prometheus_binary(operator.PROMETHEUS_RELEASE, "promtool"), "check", "rules", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize("source", ["prometheus_alerts.yaml", "prometheus_rules.yaml"])
def test_every_rule_of_rules_reaches_prometheus(manifests, reconciled, source):
    """Each alert and recording rule the mixin generated, in its group, as generated."""
    _, rules = reconciled
    [rule] = [o for o in manifests if o["kind"] == "PrometheusRule"]
    generated = {g["name"]: g["rules"] for g in rule_file_of(rules, rule)["groups"]}
    groups = yaml.safe_load((RULES / source).read_text())["groups"]
    assert groups
    for group in groups:
        for r in group["rules"]:
            assert r in generated.get(group["name"], []), (group["name"], r)


def broken(obj, path, value, rename=None):
    """A copy of `obj` under another name with the field at `path` set to `value` (or,
    with `rename`, the field renamed)."""
    out = copy.deepcopy(obj)
    out["metadata"]["name"] += "-broken"
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    if rename:
        parent[rename] = parent.pop(path[-1])
    else:
        parent[path[-1]] = value
    return out


def spellings(obj, path) -> list[str]:
    """How the API server names the field at `path`: by index (schema validation) or, in
    a PrometheusRule's groups (a list keyed by name), by the group's name (server-side
    apply's typed patch)."""
    dotted = "".join(f"[{k}]" if isinstance(k, int) else f".{k}" for k in path).lstrip(".")
    if path[:2] != ("spec", "groups"):
        return [dotted]
    name = obj["spec"]["groups"][path[2]]["name"]
    return [dotted, dotted.replace(f"groups[{path[2]}]", f'groups[name="{name}"]', 1)]


def first_alert_with_for(rule):
    for g, group in enumerate(rule["spec"]["groups"]):
        for r, item in enumerate(group["rules"]):
            if "for" in item:
                return g, r
    raise AssertionError("no alert with `for`")


G, R = "group", "rule"  # the first alert with a `for`, found in our PrometheusRule
BROKEN = {
    # kind: [(path, value or None, the field's new name or None)]
    "ServiceMonitor": [
        (("spec", "endpoints", 0, "scheme"), "tcp", None),
        (("spec", "endpoints", 0, "interval"), "30 seconds", None),
        (("spec", "sampleLimit"), "86", None),
        (("spec", "endpoints", 0, "relabelings", 0, "action"), "rename", None),
        (("spec", "endpoints", 0, "bearerTokenFile"), None, "bearerTokenPath"),
    ],
    "PrometheusRule": [
        (("spec", "groups", G, "rules", R, "for"), "ten minutes", None),
        (("spec", "groups", G, "rules", R, "expr"), None, "expression"),
        (("spec", "groups", 0, "rules"), {"alert": "X"}, None),
    ],
}
CASES = [(kind, *case) for kind, cases in BROKEN.items() for case in cases]


@pytest.mark.parametrize(
    "kind,path,value,rename",
    CASES,
    ids=[f"{c[0]}:{'.'.join(map(str, c[1]))}={c[3] or c[2]!r}" for c in CASES],
)
def test_the_release_s_schema_refuses_a_wrong_field(manifests, applied, kind, path, value, rename):
    """A deliberately broken copy of our own object: the API server refuses it, naming the
    field (types, enums and patterns of the schema; unknown fields too, under the Strict
    field validation of `kubectl apply --server-side`). The object as deploy/ has it
    applies."""
    obj = next(o for o in manifests if o["kind"] == kind)
    if G in path:
        g, r = first_alert_with_for(obj)
        path = tuple({G: g, R: r}.get(p, p) for p in path)
    assert operator.apply(applied, [obj]).returncode == 0
    result = operator.apply(applied, [broken(obj, path, value, rename)], check=False)
    assert result.returncode != 0, result.stdout
    named = path[:-1] + (rename,) if rename else path
    assert any(f in result.stderr for f in spellings(obj, named)), result.stderr
