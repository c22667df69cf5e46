// Fleet totals of image pulls: what waits for a pull slot, what moves, what is stuck.
local promql = import '../lib/promql.libsonnet';
{
  prometheusRules+:: {
    groups+: [
      {
        local c = $._config,
        name: 'kube-scale-exporter-imagepull.rules',
        rules: [
          {
            record: 'cluster:kubescale_image_pulls_queued:sum',
            expr: 'sum by (%(clusterLabel)s) (kubescale_image_pulls_queued{%(nodeExporterSelector)s})' % c,
          },
          {
            record: 'cluster:kubescale_image_pulls_in_progress:sum',
            expr: 'sum by (%(clusterLabel)s) (kubescale_image_pulls_in_progress{%(nodeExporterSelector)s})' % c,
          },
          {
            record: 'cluster:kubescale_image_pull_stalled:sum',
            expr: 'sum by (%(clusterLabel)s) (kubescale_image_pull_stalled{%(nodeExporterSelector)s})' % c,
          },
          {
            record: 'cluster:kubescale_image_pull_oldest_seconds:max',
            expr: 'max by (%(clusterLabel)s) (kubescale_image_pull_oldest_seconds{%(nodeExporterSelector)s})' % c,
          },
          {
            // "Worst nodes" tables: only nodes with something to show, at most topK of them.
            record: 'node:kubescale_image_pulls_queued:topk%(topK)d' % c,
            expr: 'topk by (%(clusterLabel)s) (%(topK)d, kubescale_image_pulls_queued{%(nodeExporterSelector)s} > 0)' % c,
          },
          {
            record: 'node:kubescale_image_pull_oldest_seconds:topk%(topK)d' % c,
            expr: 'topk by (%(clusterLabel)s) (%(topK)d, kubescale_image_pull_oldest_seconds{%(nodeExporterSelector)s} > 0)' % c,
          },
          {
            record: 'cluster:kubescale_image_pull_remaining_bytes:sum',
            expr: |||
              sum by (%(clusterLabel)s) (
                kubescale_image_pull_expected_bytes{%(nodeExporterSelector)s}
                - kubescale_image_pull_downloaded_bytes{%(nodeExporterSelector)s}
              )
            ||| % c,
          },
          {
            record: 'cluster:kubescale_image_pull_nodes_with_backlog:sum',
            expr: 'sum by (%(clusterLabel)s) (kubescale_image_pulls_queued{%(nodeExporterSelector)s} > bool 0)' % c,
          },
          {
            record: 'cluster:kubescale_kubelet_serialize_image_pulls:sum',
            expr: 'sum by (%(clusterLabel)s) (kubescale_kubelet_serialize_image_pulls{%(nodeExporterSelector)s})' % c,
          },
          {
            record: 'cluster:kubescale_image_preload_nodes_missing:sum',
            expr: 'sum by (%(clusterLabel)s) (kubescale_image_preload_missing{%(nodeExporterSelector)s} > bool 0)' % c,
          },
          {
            record: 'cluster:kubescale_image_pulls_failing:sum',
            expr: 'sum by (%(clusterLabel)s) (kubescale_image_pulls_failing{%(nodeExporterSelector)s})' % c,
          },
          // Cluster mode: failed pulls by registry and cause (at most 11 registries x 6).
          // max, not sum: two cluster-mode replicas during a rollout count the same events.
          {
            record: 'cluster_registry_reason:kubescale_image_pull_failures:rate%(rateInterval)s' % c,
            expr: 'max by (%(clusterLabel)s, registry, reason) (rate(kubescale_image_pull_failures_total{%(clusterExporterSelector)s}[%(rateInterval)s]))' % c,
          },
        ] + [
          // containerd's pull settings: how many nodes of each cluster (or node pool) run each
          // value, which count_values puts in the `value` label. A node image ships one value
          // to a whole pool; the settings alert compares each pool with its majority. Held over
          // gapTolerance, so a lost scrape does not drop a node from its pool's count.
          {
            record: 'cluster_value:%s:count' % metric,
            expr: 'count_values by (%s) ("value", %s)' % [promql.poolBy(c), promql.held(metric, c.nodeExporterSelector, c.gapTolerance)],
          }
          for metric in ['kubescale_containerd_max_concurrent_downloads', 'kubescale_containerd_image_pull_progress_timeout_seconds']
        ],
      },
    ],
  },
}
