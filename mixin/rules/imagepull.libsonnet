// Fleet totals of image pulls: what waits for a pull slot, what moves, what is stuck.
//
// Each node gauge is read once per evaluation: held over gapTolerance (a lost scrape keeps
// the node's last value) and kept only where it is not zero, as node:<metric>:nonzero. A
// healthy fleet has few such series; the fleet totals, the "worst nodes" tables and the
// per-node alerts read those instead of 7,500 raw series each. Totals are 0, not absent,
// for a cluster whose nodes report but all read 0 (cluster:kubescale_image_pull_nodes:count).
local promql = import '../lib/promql.libsonnet';
{
  prometheusRules+:: {
    groups+: [
      {
        local c = $._config,
        local nonzero(metric) = 'node:%s:nonzero' % metric,
        // The per-node gauges the alerts hold through their `for` (nodeAlertInterval).
        name: 'kube-scale-exporter-imagepull.rules',
        interval: c.nodeAlertInterval,
        rules: [
          {
            record: nonzero(metric),
            expr: '%s > 0' % promql.held(metric, c.nodeExporterSelector, c.gapTolerance),
          }
          for metric in [
            'kubescale_image_pulls_queued',
            'kubescale_image_pulls_in_progress',
            'kubescale_image_pull_stalled',
            'kubescale_image_pull_oldest_seconds',
          ]
        ],
      },
      {
        local c = $._config,
        local nonzero(metric) = 'node:%s:nonzero' % metric,
        local nodes = 'cluster:kubescale_image_pull_nodes:count',
        local orZero(expr, base=nodes) = '%s\nor on (%s)\n0 * %s' % [expr, c.clusterLabel, base],
        // The fleet totals and "worst nodes" tables, which only dashboards read, and views of
        // slow-moving inputs (the kubelet's settings, back-offs, preloads) that only dashboards
        // and alerts with a `for` of 15 minutes and more read: on slowInterval.
        name: 'kube-scale-exporter-imagepull-views.rules',
        interval: c.slowInterval,
        rules: [
          {
            record: nodes,
            expr: 'count by (%(clusterLabel)s) (kubescale_image_pulls_in_progress{%(nodeExporterSelector)s})' % c,
          },
          {
            record: 'cluster:kubescale_image_pulls_queued:sum',
            expr: orZero('sum by (%s) (%s)' % [c.clusterLabel, nonzero('kubescale_image_pulls_queued')]),
          },
          {
            record: 'cluster:kubescale_image_pulls_in_progress:sum',
            expr: orZero('sum by (%s) (%s)' % [c.clusterLabel, nonzero('kubescale_image_pulls_in_progress')]),
          },
          {
            record: 'cluster:kubescale_image_pull_stalled:sum',
            expr: orZero('sum by (%s) (%s)' % [c.clusterLabel, nonzero('kubescale_image_pull_stalled')]),
          },
          {
            record: 'cluster:kubescale_image_pull_oldest_seconds:max',
            expr: orZero('max by (%s) (%s)' % [c.clusterLabel, nonzero('kubescale_image_pull_oldest_seconds')]),
          },
          {
            // "Worst nodes" tables: only nodes with something to show, at most topK of them.
            record: 'node:kubescale_image_pulls_queued:topk%(topK)d' % c,
            expr: 'topk by (%s) (%d, %s)' % [c.clusterLabel, c.topK, nonzero('kubescale_image_pulls_queued')],
          },
          {
            record: 'node:kubescale_image_pull_oldest_seconds:topk%(topK)d' % c,
            expr: 'topk by (%s) (%d, %s)' % [c.clusterLabel, c.topK, nonzero('kubescale_image_pull_oldest_seconds')],
          },
          {
            record: 'cluster:kubescale_image_pull_nodes_with_backlog:sum',
            expr: orZero('count by (%s) (%s)' % [c.clusterLabel, nonzero('kubescale_image_pulls_queued')]),
          },
        ] + [
          {
            record: nonzero(metric),
            expr: '%s > 0' % promql.held(metric, c.nodeExporterSelector, c.gapTolerance),
          }
          for metric in [
            'kubescale_kubelet_serialize_image_pulls',
            'kubescale_image_pulls_failing',
            'kubescale_image_preload_missing',
          ]
        ] + [
          {
            record: 'cluster:kubescale_kubelet_serialize_image_pulls:sum',
            expr: orZero('sum by (%s) (%s)' % [c.clusterLabel, nonzero('kubescale_kubelet_serialize_image_pulls')]),
          },
          {
            // The preload check is opt-in: no total where no node runs it.
            record: 'cluster:kubescale_image_preload_nodes_missing:sum',
            expr: orZero(
              'count by (%s) (%s)' % [c.clusterLabel, nonzero('kubescale_image_preload_missing')],
              'count by (%(clusterLabel)s) (kubescale_image_preload_missing{%(nodeExporterSelector)s})' % c
            ),
          },
          {
            record: 'cluster:kubescale_image_pulls_failing:sum',
            expr: orZero('sum by (%s) (%s)' % [c.clusterLabel, nonzero('kubescale_image_pulls_failing')]),
          },

          {
            // Two sums, not the sum of every node's difference: one scrape writes both series
            // of a node, so the totals are the same without matching 7,500 pairs label set by
            // label set.
            record: 'cluster:kubescale_image_pull_remaining_bytes:sum',
            expr: |||
              sum by (%(clusterLabel)s) (kubescale_image_pull_expected_bytes{%(nodeExporterSelector)s})
              - on (%(clusterLabel)s)
              sum by (%(clusterLabel)s) (kubescale_image_pull_downloaded_bytes{%(nodeExporterSelector)s})
            ||| % c,
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
