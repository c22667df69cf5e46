"""What the live tests past one Prometheus share (VictoriaMetrics and vmalert, Thanos): two
clusters of real exporters and etcds, each scraped by hashmod-sharded Prometheus servers as
docs/scaling.md shows, and Grafana's way of resolving the dashboards' variables.

Each cluster ("east", "west") has node-mode exporters standing in for its nodes, with the same
node names in both clusters, and a cluster-mode exporter watching its own real etcd; both
etcds are etcd cluster "main" with a member of the same name. East's etcd is filled until it
raises NOSPACE; west's is left small. Counts that differ between the clusters (node targets:
3 in east, 2 in west) show a rule that merges them.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass

from testbed.etcd_server import EtcdServer
from testbed.ports import free_port
from tests.mixin.support import REPO, build, dashboard_queries
from tools import demo

NODES = {"east": 3, "west": 2}
SHARDS = 2
SCRAPE = "2s"
RULE_FILES = [
    REPO / "rules" / name
    for name in (
        "prometheus_rules.yaml",
        "prometheus_alerts.yaml",
        "prometheus_selfprotection_alerts.yaml",
    )
]
# The job of each shard's own Prometheus, for the self-protection rules.
SELF_JOB = "prometheus-k8s"


@dataclass
class Cluster:
    name: str
    node_ports: list[int]
    cluster_port: int


def start_clusters(workdir, procs: list) -> list[Cluster]:
    """Every cluster's exporters and etcd, started (appended to `procs` for the caller to stop)."""
    clusters = []
    for cluster, nodes in NODES.items():
        node_ports = []
        for i in range(nodes):
            node_ports.append(free_port())
            procs.append(
                demo.exporter(["--mode", "node"], node_ports[-1], workdir, f"{cluster}-n{i}")
            )
        etcd_dir = workdir / f"etcd-{cluster}"
        etcd_dir.mkdir()
        etcd_server = EtcdServer(etcd_dir, name="etcd-0", quota_bytes=demo.QUOTA).start()
        procs.append(etcd_server)
        etcd = demo.Etcd(etcd_server.client_url)
        if cluster == "east":
            while etcd.put_object():
                pass
        else:
            etcd.put_object()
        cluster_port = free_port()
        cluster_args = [
            "--mode",
            "cluster",
            "--etcd.cluster",
            f"main={etcd_server.client_url}",
            "--etcd.min-interval",
            "1",
            "--etcd.keys-interval",
            "1",
        ]
        procs.append(demo.exporter(cluster_args, cluster_port, workdir, f"{cluster}-cluster"))
        clusters.append(Cluster(cluster, node_ports, cluster_port))
    return clusters


def node_targets(cluster: Cluster, labels=None) -> list[dict]:
    return [
        {"targets": [f"127.0.0.1:{port}"], "labels": {"node": f"n{i}", **(labels or {})}}
        for i, port in enumerate(cluster.node_ports)
    ]


def shard_config(
    cluster: Cluster, shard: int, self_port: int, remote_write_url=None, external_labels=None
) -> dict:
    """Prometheus shard `shard` of `cluster`: the scrape config docs/scaling.md shows (node
    targets split by hashmod of their address, the cluster-mode job whole on shard 0, the
    cluster in external_labels, with `external_labels` besides), remote-writing where a store
    takes it."""
    keep_shard = [
        {
            "source_labels": ["__address__"],
            "modulus": SHARDS,
            "target_label": "__tmp_shard",
            "action": "hashmod",
        },
        {"source_labels": ["__tmp_shard"], "regex": str(shard), "action": "keep"},
    ]
    jobs = [
        {
            "job_name": demo.NODE_JOB,
            "static_configs": node_targets(cluster),
            "relabel_configs": keep_shard,
        },
        {"job_name": SELF_JOB, "static_configs": [{"targets": [f"127.0.0.1:{self_port}"]}]},
    ]
    if shard == 0:
        jobs.append(
            {
                "job_name": demo.CLUSTER_JOB,
                "static_configs": [{"targets": [f"127.0.0.1:{cluster.cluster_port}"]}],
            }
        )
    config = {
        "global": {
            "scrape_interval": SCRAPE,
            "external_labels": {"cluster": cluster.name, **(external_labels or {})},
        },
        "scrape_configs": jobs,
    }
    if remote_write_url:
        config["remote_write"] = [
            {"url": remote_write_url, "queue_config": {"batch_send_deadline": "1s"}}
        ]
    return config


def by_cluster(found, *labels):
    return {
        (dict(k)["cluster"], *(dict(k).get(label) for label in labels)): v for k, v in found.items()
    }


def variables(api, dashboard, cluster, store_name) -> dict[str, str]:
    """Each query variable's first value, as Grafana resolves label_values(SELECTOR, LABEL)
    through `api(path, **params)` (a Prometheus API reply)."""
    chosen = {"cluster": cluster, "__rate_interval": "1m"}
    for variable in dashboard["templating"]["list"]:
        if variable["type"] != "query":
            continue
        selector, label = re.fullmatch(
            r"label_values\((.*), (\w+)\)", variable["query"]["query"]
        ).groups()
        selector = substitute(selector, chosen)
        reply = api(f"/api/v1/label/{label}/values", **{"match[]": selector})
        assert reply["status"] == "success", (variable["name"], reply)
        if variable["name"] != "cluster":
            assert reply["data"], f"{variable['name']}: {selector} has no {label} on {store_name}"
            chosen[variable["name"]] = reply["data"][0]
        else:
            assert set(reply["data"]) == set(NODES)
    return chosen


def substitute(expr, chosen):
    return re.sub(r"\$(\w+)", lambda m: chosen[m.group(1)], expr)


def dashboards(multi_cluster: bool) -> dict:
    """The dashboards with the cluster picker (rendered), or the committed ones (without)."""
    if multi_cluster:
        return build.mixin_object({"showMultiCluster": True})["dashboards"]
    return {p.name: json.loads(p.read_text()) for p in (REPO / "dashboards").glob("*.json")}


def check_dashboard_queries(api, store_name, multi_cluster, *, no_warnings=False) -> None:
    """Grafana's instant and range queries of every dashboard panel through `api`, each
    cluster picked in turn: none fails (nor, with `no_warnings`, comes back with a warning, as a
    partial answer does), and with the cluster picker (`multi_cluster`) every series returned
    is of the picked cluster and both clusters draw panels."""
    boards = dashboards(multi_cluster)
    end = time.time()
    with_data = {}
    for cluster in NODES:
        for name, dashboard in boards.items():
            chosen = variables(api, dashboard, cluster, store_name)
            for title, expr in dashboard_queries(dashboard):
                if title.startswith("variable "):
                    continue
                query = substitute(expr, chosen)
                for path, params in (
                    ("/api/v1/query", {"query": query, "time": end}),
                    (
                        "/api/v1/query_range",
                        {"query": query, "start": end - 120, "end": end, "step": 10},
                    ),
                ):
                    reply = api(path, **params)
                    assert reply["status"] == "success", f"{name} / {title}: {query}: {reply}"
                    if no_warnings:
                        assert not reply.get("warnings"), f"{name} / {title}: {query}: {reply}"
                    result = reply["data"]["result"]
                    if multi_cluster:
                        seen = {r["metric"].get("cluster", cluster) for r in result}
                        assert seen <= {cluster}, f"{name} / {title}: {query} gave {seen}"
                    if result and path.endswith("query"):
                        with_data.setdefault(cluster, set()).add((name, title, expr))
    print({c: len(panels) for c, panels in with_data.items()})
    if multi_cluster:
        assert with_data["east"] and with_data["west"]
        # West's etcd raises no alarm; every panel but the alarm's and alerts' draws for both.
        assert with_data["west"] <= with_data["east"]
