"""promtool unit tests too large to write by hand: a DaemonSet of 1,000 targets, written to a
file at test time. promtool caps the samples one query may load, so the fleet is 1,000
targets (not 7,500) over an hour: the shares and counts are what matter.
"""

import yaml

from tests.mixin.support import REPO

NODE_JOB = "kube-scale-exporter-node"
CLUSTER_JOB = "kube-scale-exporter-cluster"
RUNBOOK = "https://github.com/kube-scale-exporter/kube-scale-exporter/blob/main/docs/runbooks.md#"
TARGETS = 1000
MINUTES = 60


def _node(i):
    return f"node-{i:04d}", f"10.{i // 250}.{i % 250}.1:9867"


def _up(values_for):
    """Input series of `up` for the node job (values_for(i) -> list of values) and a healthy
    cluster-mode target."""
    series = []
    for i in range(TARGETS):
        node, instance = _node(i)
        series.append(
            {
                "series": f'up{{job="{NODE_JOB}", instance="{instance}", node="{node}", cluster="prod"}}',
                "values": " ".join(str(v) for v in values_for(i)),
            }
        )
    series.append(
        {
            "series": f'up{{job="{CLUSTER_JOB}", instance="10.9.0.1:9867", cluster="prod"}}',
            "values": f"1x{MINUTES}",
        }
    )
    return series


def _stuck(down):
    """A rollout stuck from minute 10: `down` new pods crash-loop and are never scraped."""
    return lambda i: [1] * 10 + [0 if i < down else 1] * (MINUTES - 9)


def _healthy_rollout(i):
    """A rollout that works: 100 pods at a time (the maxUnavailable) are replaced, and each
    new pod misses one scrape while it starts; the batches move on every minute."""
    values = [1] * (MINUTES + 1)
    values[10 + i // 100] = 0
    return values


def _firing(down):
    return [
        {
            "exp_labels": {"severity": "warning", "cluster": "prod", "job": NODE_JOB},
            "exp_annotations": {
                "summary": "A share of kube-scale-exporter targets cannot be scraped.",
                "description": f"{down} {NODE_JOB} targets are down, at least 5% of the job "
                "(Status > Targets lists them).",
                "runbook_url": RUNBOOK + "kubescaleexportertargetsdown",
            },
        }
    ]


def rollout_tests() -> dict:
    """A DaemonSet rollout stuck at exactly its maxUnavailable (100 of 1,000), one stuck just
    under it (99), and one that works (each batch of 100 down for a scrape)."""
    tests = []
    for down in (100, 99):
        tests.append(
            {
                "interval": "1m",
                "input_series": _up(_stuck(down)),
                "promql_expr_test": [
                    {
                        "expr": "cluster_job:kubescale_exporter_targets_down:sum",
                        "eval_time": "20m",
                        "exp_samples": [
                            {
                                "labels": f'cluster_job:kubescale_exporter_targets_down:sum{{cluster="prod", job="{NODE_JOB}"}}',
                                "value": down,
                            },
                            {
                                "labels": f'cluster_job:kubescale_exporter_targets_down:sum{{cluster="prod", job="{CLUSTER_JOB}"}}',
                                "value": 0,
                            },
                        ],
                    }
                ],
                "alert_rule_test": [
                    {
                        "alertname": "KubeScaleExporterTargetsDown",
                        "eval_time": "20m",
                        "exp_alerts": [],
                    },
                    {
                        "alertname": "KubeScaleExporterTargetsDown",
                        "eval_time": "30m",
                        "exp_alerts": _firing(down),
                    },
                ],
            }
        )
    tests.append(
        {
            "interval": "1m",
            "input_series": _up(_healthy_rollout),
            "alert_rule_test": [
                {
                    "alertname": "KubeScaleExporterTargetsDown",
                    "eval_time": f"{t}m",
                    "exp_alerts": [],
                }
                for t in (15, 25, 40)
            ],
        }
    )
    return {
        "rule_files": [
            str(REPO / "rules" / "prometheus_rules.yaml"),
            str(REPO / "rules" / "prometheus_alerts.yaml"),
        ],
        "evaluation_interval": "1m",
        "group_eval_order": ["kube-scale-exporter-exporter.rules", "kube-scale-exporter-exporter"],
        "tests": tests,
    }


GENERATED = {"rollout_test.yaml": rollout_tests}


def write(name, directory):
    path = directory / name
    path.write_text(yaml.safe_dump(GENERATED[name](), sort_keys=False))
    return path
