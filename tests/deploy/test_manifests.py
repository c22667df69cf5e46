"""deploy/: generated from one source, least privilege, and what issue 8 asks of each pod."""
import importlib.util
import json
import os
import subprocess
import sys
import time

import pytest
import yaml

from kube_scale_exporter.cli import DEFAULT_PORT, build_parser
from kube_scale_exporter.collectors import COLLECTORS
from testbed.ports import free_port
from testbed.procs import Proc, wait_for_port
from testbed.prometheus import PrometheusServer

DEPLOY = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                      "deploy")


def load_generator():
    """deploy/generate.py is a script beside its output, not a package: load it by path."""
    spec = importlib.util.spec_from_file_location("deploy_generate",
                                                  os.path.join(DEPLOY, "generate.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


generate = load_generator()

READ_VERBS = {"get", "list", "watch"}


def by_kind(manifests, kind):
    return [obj for _, obj in manifests if obj["kind"] == kind]


def pod_templates(manifests):
    return {obj["metadata"]["name"]: obj["spec"]["template"]["spec"]
            for _, obj in manifests if obj["kind"] in ("DaemonSet", "Deployment")}


def mode_of(pod):
    [c] = pod["containers"]
    return build_parser().parse_args(c["args"]).mode


# --- one source ------------------------------------------------------------------------

def test_committed_files_are_what_the_generator_writes():
    result = subprocess.run([sys.executable, os.path.join(DEPLOY, "generate.py"), "--check"],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    written = {os.path.relpath(os.path.join(d, f), DEPLOY)
               for d, _, files in os.walk(DEPLOY) for f in files}
    generated = set(generate.render(generate.load_values(os.path.join(DEPLOY, "values.yaml"))))
    assert written - generated == {"generate.py", "values.yaml", "Makefile.inc"}


def test_check_fails_on_a_hand_edited_file(tmp_path):
    subprocess.run([sys.executable, os.path.join(DEPLOY, "generate.py"), "--out", tmp_path],
                   check=True, timeout=60)
    node = tmp_path / "manifests" / "node.yaml"
    node.write_text(node.read_text().replace("readOnlyRootFilesystem: true",
                                             "readOnlyRootFilesystem: false"))
    result = subprocess.run([sys.executable, os.path.join(DEPLOY, "generate.py"), "--check",
                             "--out", tmp_path], capture_output=True, text=True, timeout=60)
    assert result.returncode == 1
    assert "-          readOnlyRootFilesystem: false" in result.stdout
    assert "make generate" in result.stderr


def test_other_values_change_only_what_they_name(tmp_path):
    values = generate.load_values(os.path.join(DEPLOY, "values.yaml"))
    values.update(namespace="monitoring", image="registry.example/kse:9.9")
    values["node"]["collectors"] = ["neighbor"]
    values["node"]["priorityClassName"] = ""
    values["etcdNodes"]["enabled"] = False
    docs = [d for text in generate.render(values).values() if text.count("kind:")
            for d in yaml.safe_load_all(text) if d and "kind" in d]
    [ds] = [d for d in docs if d["kind"] == "DaemonSet"]
    pod = ds["spec"]["template"]["spec"]
    assert "volumes" not in pod and "priorityClassName" not in pod
    assert pod["automountServiceAccountToken"] is False
    assert not [d for d in docs if d["kind"] == "ClusterRole"
                and d["metadata"]["name"].endswith("-node")], "no API access, no RBAC"
    assert pod["containers"][0]["image"] == "registry.example/kse:9.9"
    assert {d["metadata"].get("namespace") for d in docs if d["kind"] != "Kustomization"} <= \
        {"monitoring", None}


def test_a_web_config_secret_switches_flags_probes_and_monitors_to_https():
    values = generate.load_values(os.path.join(DEPLOY, "values.yaml"))
    values["web"] = {"configSecret": "kse-web", "scheme": "https"}
    docs = [d for text in generate.render(values).values()
            for d in yaml.safe_load_all(text) if d and "kind" in d]
    pods = {d["metadata"]["name"]: d["spec"]["template"]["spec"] for d in docs
            if d["kind"] in ("DaemonSet", "Deployment")}
    for name, pod in pods.items():
        [c] = pod["containers"]
        assert "--web.config.file=/etc/kube-scale-exporter/web/web.yml" in c["args"]
        assert c["livenessProbe"]["httpGet"]["scheme"] == "HTTPS"
        assert {"name": "web-config", "mountPath": "/etc/kube-scale-exporter/web",
                "readOnly": True} in c["volumeMounts"]
        assert {"name": "web-config", "secret": {"secretName": "kse-web",
                                                 "defaultMode": 0o440}} in pod["volumes"]
        user = c["securityContext"].get("runAsUser", pod["securityContext"].get("runAsUser"))
        assert user == 0 or pod["securityContext"]["fsGroup"] == 65534, name
    for mon in (d for d in docs if d["kind"] == "ServiceMonitor"):
        assert mon["spec"]["endpoints"][0]["scheme"] == "https"


def test_every_registered_collector_has_an_entry_for_each_of_its_modes():
    # A new collector must say what it mounts and reads before it can be deployed.
    values = generate.load_values(os.path.join(DEPLOY, "values.yaml"))
    for name, cls in {c.name: c for c in COLLECTORS}.items():
        for mode in cls.modes:
            generate.needs(name, mode, values)


# --- the pods --------------------------------------------------------------------------

def test_container_flags_are_the_cli_s_own(manifests):
    parser = build_parser()
    known = {c.name: c for c in COLLECTORS}
    for name, pod in pod_templates(manifests).items():
        [c] = pod["containers"]
        args = parser.parse_args(c["args"])  # exits 2 on a flag the CLI does not have
        for flag in c["args"]:
            if flag.startswith("--collector.") and flag != "--collector.disable-defaults":
                collector = flag.removeprefix("--collector.")
                assert args.mode in known[collector].modes, (name, flag)
        assert args.listen == ("", DEFAULT_PORT)
        assert c["ports"] == [{"name": "metrics", "containerPort": DEFAULT_PORT,
                               "protocol": "TCP"}]


def test_every_pod_is_locked_down(manifests):
    for name, pod in pod_templates(manifests).items():
        [c] = pod["containers"]
        sc = c["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False, name
        assert sc["readOnlyRootFilesystem"] is True, name
        assert sc["capabilities"] == {"drop": ["ALL"]}, name
        assert "privileged" not in sc and "add" not in sc["capabilities"]
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert not pod.get("hostPID") and not pod.get("hostIPC")
        user = sc.get("runAsUser", pod["securityContext"].get("runAsUser"))
        if name.endswith("-etcd-node"):
            # The one exception, documented in docs/deploy.md: kubeadm's etcd client key is
            # 0600 root. Owning it, uid 0 reads it with every capability dropped.
            assert (user, sc["runAsNonRoot"]) == (0, False)
            assert any(v["hostPath"]["path"].endswith("healthcheck-client.key")
                       for v in pod["volumes"])
        else:
            assert pod["securityContext"]["runAsNonRoot"] is True, name
            assert user == 65534, name
        assert c["resources"]["requests"] and c["resources"]["limits"]


def test_host_paths_are_read_only_and_only_what_the_collectors_read(manifests):
    values = generate.load_values(os.path.join(DEPLOY, "values.yaml"))
    for name, pod in pod_templates(manifests).items():
        [c] = pod["containers"]
        args = build_parser().parse_args(c["args"])
        collectors = [f.removeprefix("--collector.") for f in c["args"]
                      if f.startswith("--collector.") and f != "--collector.disable-defaults"]
        wanted = {m.path: m.type for col in collectors
                  for m in generate.needs(col, args.mode, values).mounts}
        host = {v["name"]: v["hostPath"] for v in pod.get("volumes", ()) if "hostPath" in v}
        assert {h["path"]: h["type"] for h in host.values()} == wanted, name
        for mount in c.get("volumeMounts", ()):
            assert mount["readOnly"] is True
            if mount["name"] in host:
                assert mount["mountPath"] == host[mount["name"]]["path"]
        assert "/etc/kubernetes/pki/etcd/ca.key" not in wanted


def test_node_mode_runs_on_every_node_with_the_host_network(manifests):
    pods = pod_templates(manifests)
    for name, pod in pods.items():
        node = mode_of(pod) == "node"
        assert bool(pod.get("hostNetwork")) == node, name
        if node:
            assert {"operator": "Exists"} in pod["tolerations"]
            assert pod["priorityClassName"] == "system-node-critical"
            [c] = pod["containers"]
            assert {"name": "NODE_NAME", "valueFrom": {"fieldRef": {
                "fieldPath": "spec.nodeName"}}} in c["env"]
    # The two DaemonSets split the nodes between them: none gets both, none is left out.
    plain, etcd = pods["kube-scale-exporter-node"], pods["kube-scale-exporter-etcd-node"]
    [(key, _)] = [(k, v) for k, v in etcd["nodeSelector"].items() if k not in plain["nodeSelector"]]
    terms = plain["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [{"matchExpressions": [
        {"key": key, "operator": "DoesNotExist"}]}]


def test_the_cluster_deployment_has_one_replica_and_its_own_service_account(manifests):
    [dep] = by_kind(manifests, "Deployment")
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    accounts = {ds["spec"]["template"]["spec"]["serviceAccountName"]
                for ds in by_kind(manifests, "DaemonSet")}
    assert dep["spec"]["template"]["spec"]["serviceAccountName"] not in accounts
    assert {sa["metadata"]["name"] for sa in by_kind(manifests, "ServiceAccount")} == \
        accounts | {dep["spec"]["template"]["spec"]["serviceAccountName"]}


# --- RBAC ------------------------------------------------------------------------------

def rules_of(manifests, name):
    [role] = [r for r in by_kind(manifests, "ClusterRole") if r["metadata"]["name"] == name]
    return {(g, res): set(rule["verbs"]) for rule in role["rules"]
            for g in rule["apiGroups"] for res in rule["resources"]}


def test_rbac_is_read_only_and_never_secrets_or_node_proxy(manifests):
    assert not by_kind(manifests, "Role") and not by_kind(manifests, "RoleBinding")
    for role in by_kind(manifests, "ClusterRole"):
        for rule in role["rules"]:
            assert set(rule["verbs"]) <= READ_VERBS
            assert "*" not in rule["resources"] and "*" not in rule["apiGroups"]
            assert not {"secrets", "nodes/proxy", "pods/exec", "pods/log",
                        "configmaps"} & set(rule["resources"])
            assert "resourceNames" not in rule and "nonResourceURLs" not in rule


def test_node_mode_may_only_list_and_watch_pods(manifests):
    assert rules_of(manifests, "kube-scale-exporter-node") == {("", "pods"): {"list", "watch"}}


def test_cluster_mode_reads_what_its_collectors_watch(manifests):
    assert rules_of(manifests, "kube-scale-exporter-cluster") == {
        ("", "pods"): {"list", "watch"},
        ("", "nodes"): {"list", "watch"},
        ("", "events"): {"list", "watch"},
        ("scheduling.k8s.io", "priorityclasses"): {"list", "watch"},
    }


def test_each_binding_binds_its_role_to_its_own_service_account(manifests):
    for binding in by_kind(manifests, "ClusterRoleBinding"):
        name = binding["metadata"]["name"]
        assert binding["roleRef"]["name"] == name
        assert binding["subjects"] == [{"kind": "ServiceAccount", "name": name,
                                        "namespace": "kube-scale-exporter"}]


# --- scraping --------------------------------------------------------------------------

SCRAPES = [("kube-scale-exporter-node", 80, "kube-scale-exporter-node"),
           ("kube-scale-exporter-etcd-node", 320, "kube-scale-exporter-node"),
           ("kube-scale-exporter-cluster", 1000, "kube-scale-exporter-cluster")]


@pytest.mark.parametrize("name,limit,job", SCRAPES)
def test_service_monitors_add_the_node_label_and_twice_the_budget(manifests, name, limit, job):
    [mon] = [m for m in by_kind(manifests, "ServiceMonitor") if m["metadata"]["name"] == name]
    assert mon["spec"]["sampleLimit"] == limit
    [endpoint] = mon["spec"]["endpoints"]
    assert {"sourceLabels": ["__meta_kubernetes_pod_node_name"], "targetLabel": "node",
            "action": "replace"} in endpoint["relabelings"]
    # the job label the mixin selects on: the Service's name, unless set explicitly
    [svc] = [s for s in by_kind(manifests, "Service")
             if s["metadata"]["labels"] == mon["spec"]["selector"]["matchLabels"]]
    assert svc["metadata"]["name"] == name
    set_job = [r["replacement"] for r in endpoint["relabelings"] if r.get("targetLabel") == "job"]
    assert (set_job or [name]) == [job]


def test_each_service_selects_the_pods_of_exactly_one_workload(manifests):
    templates = {obj["metadata"]["name"]: obj["spec"]["template"]["metadata"]["labels"]
                 for _, obj in manifests if obj["kind"] in ("DaemonSet", "Deployment")}
    for svc in by_kind(manifests, "Service"):
        selector = svc["spec"]["selector"].items()
        chosen = [name for name, pod in templates.items() if selector <= pod.items()]
        assert chosen == [svc["metadata"]["name"]], (svc["metadata"]["name"], chosen)


def test_the_plain_scrape_config_relabels_in_a_real_prometheus(tmp_path):
    """Debian's Prometheus has no Kubernetes discovery, so file_sd hands it the same
    __meta_kubernetes_* labels endpoints discovery would; the relabelling is the file's."""
    with open(os.path.join(DEPLOY, "prometheus", "prometheus.yml")) as f:
        config = yaml.safe_load(f)
    jobs = {j["job_name"]: j for j in config["scrape_configs"]}
    assert {name: j["sample_limit"] for name, j in jobs.items()} == {
        name: limit for name, limit, _ in SCRAPES}
    port = free_port()
    exporter = Proc([sys.executable, "-m", "kube_scale_exporter", "--collector.disable-defaults",
                     "--web.listen-address", f"127.0.0.1:{port}"], tmp_path / "exporter.log",
                    cwd=os.path.dirname(DEPLOY))
    meta = {"__meta_kubernetes_namespace": "kube-scale-exporter",
            "__meta_kubernetes_endpoint_port_name": "metrics"}
    # What endpoints discovery would find: one pod of each node DaemonSet, and another
    # Service's endpoint on the same namespace, which the jobs must drop.
    found = [("kube-scale-exporter-node", "gpu-node-17", "127.0.0.1"),
             ("kube-scale-exporter-etcd-node", "control-plane-1", "127.0.0.1"),
             ("kube-dns", "gpu-node-17", "127.0.0.2")]
    targets = [{"targets": [f"{address}:{port}"],
                "labels": {**meta, "__meta_kubernetes_service_name": service,
                           "__meta_kubernetes_pod_node_name": node}}
               for service, node, address in found]
    (tmp_path / "targets.json").write_text(json.dumps(targets))
    run = []
    for name in ("kube-scale-exporter-node", "kube-scale-exporter-etcd-node"):
        job = jobs[name]
        assert [sd["role"] for sd in job.pop("kubernetes_sd_configs")] == ["endpoints"]
        job["file_sd_configs"] = [{"files": [str(tmp_path / "targets.json")]}]
        job.update(scrape_interval="1s", scrape_timeout="1s")
        run.append(job)
    prom = PrometheusServer(tmp_path, {"scrape_configs": run})
    try:
        wait_for_port(port, proc=exporter)
        prom.start()
        result = []
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and len(result) < 2:
            time.sleep(0.3)
            result = prom.query("up")
        # one job label for every node, the etcd nodes' included
        assert sorted((x["metric"]["node"], x["value"][1]) for x in result) == [
            ("control-plane-1", "1"), ("gpu-node-17", "1")], prom.proc.log_tail()
        for x in result:
            assert x["metric"] == {"__name__": "up", "instance": f"127.0.0.1:{port}",
                                   "job": "kube-scale-exporter-node",
                                   "namespace": "kube-scale-exporter",
                                   "node": x["metric"]["node"]}
    finally:
        prom.stop()
        exporter.stop()
