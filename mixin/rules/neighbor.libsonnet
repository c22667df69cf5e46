// Fleet views of the kernel neighbor (ARP/NDISC) tables. Per node the usage ratio is kept:
// every nodeAlertInterval for the tables near full (the alerts read those), every
// slowInterval for all (the node dashboard and the "worst nodes" tables); the rest is per
// cluster and family.
// The usage ratio of every node's tables, each side held over gapTolerance.
local usage(c) = |||
  last_over_time(%(neighborUsageMetric)s{%(nodeExporterSelector)s}[%(gapTolerance)s])
  /
  last_over_time(kubescale_neighbor_gc_thresh3{%(nodeExporterSelector)s}[%(gapTolerance)s])
||| % c;
{
  prometheusRules+:: {
    groups+: [
      {
        name: 'kube-scale-exporter-neighbor.rules',
        interval: $._config.nodeAlertInterval,
        rules: [
          {
            // GC-eligible entries are what gc_thresh3 limits (config: neighborUsageMetric).
            // Held over gapTolerance: the near-full alerts hold this ratio through their `for`,
            // which a lost scrape (the dump of a huge table timing out) must not reset. Only
            // the tables above the lower alert threshold are kept: the alerts read those, a
            // handful of series instead of every node's twice per evaluation; the full ratio
            // is recorded for the dashboards on slowInterval (neighbor-views.rules).
            record: 'node_family:kubescale_neighbor_usage_high:ratio',
            expr: '%s > %g\n' % [std.rstripChars(usage($._config), '\n'), std.min($._config.neighborUsageWarning, $._config.neighborUsageCritical)],
          },
        ],
      },
      {
        // Apart from the usage ratio, so that neither group reads more than half the
        // node tables' samples of one evaluation.
        name: 'kube-scale-exporter-neighbor-overflows.rules',
        interval: $._config.nodeAlertInterval,
        rules: [
          {
            // Only the nodes whose table overflowed: the overflow alert reads these.
            record: 'node_family:kubescale_neighbor_table_overflows:increase%(rateInterval)s' % $._config,
            expr: 'increase(kubescale_neighbor_table_overflows_total{%(nodeExporterSelector)s}[%(rateInterval)s]) > 0' % $._config,
          },
        ],
      },
      {
        // The kernel counters' fleet rates, which only dashboards read: on slowInterval, apart
        // from the usage views for the same reason as above.
        name: 'kube-scale-exporter-neighbor-overflows-views.rules',
        interval: $._config.slowInterval,
        rules: [
          {
            // From the raw counters, not the overflowing tables of the group above: a kernel without
            // table_fulls has no counter, and its family shows no rate rather than a 0.
            record: 'cluster_family:kubescale_neighbor_table_overflows:rate%(rateInterval)s' % $._config,
            expr: 'sum by (%(clusterLabel)s, family) (rate(kubescale_neighbor_table_overflows_total{%(nodeExporterSelector)s}[%(rateInterval)s]))' % $._config,
          },
          {
            record: 'cluster_family:kubescale_neighbor_forced_gc_runs:rate%(rateInterval)s' % $._config,
            expr: 'sum by (%(clusterLabel)s, family) (rate(kubescale_neighbor_forced_gc_runs_total{%(nodeExporterSelector)s}[%(rateInterval)s]))' % $._config,
          },
        ],
      },
      {
        // The per-node ratio and the fleet views, which dashboards and the hour-long
        // kernel-default alert read: on slowInterval.
        name: 'kube-scale-exporter-neighbor-views.rules',
        interval: $._config.slowInterval,
        rules: [
          {
            // Per node, for the node dashboard and the kernel-default alert; the views below
            // read it as this group just recorded it.
            record: 'node_family:kubescale_neighbor_usage:ratio',
            expr: usage($._config),
          },
          {
            // The overview's "worst nodes" table: bounded to topK series per cluster and family.
            record: 'node_family:kubescale_neighbor_usage:topk%(topK)d' % $._config,
            expr: 'topk by (%(clusterLabel)s, family) (%(topK)d, node_family:kubescale_neighbor_usage:ratio)' % $._config,
          },
          {
            // The highest of each cluster and family is in its topk: 20 series read, not 15,000.
            record: 'cluster_family:kubescale_neighbor_usage:max',
            expr: 'max by (%(clusterLabel)s, family) (node_family:kubescale_neighbor_usage:topk%(topK)d)' % $._config,
          },
          {
            record: 'cluster_family:kubescale_neighbor_nodes:count',
            expr: 'count by (%(clusterLabel)s, family) (kubescale_neighbor_gc_thresh3{%(nodeExporterSelector)s})' % $._config,
          },
          {
            // From the tables above the warning neighbor.rules keeps, 0 where none is.
            record: 'cluster_family:kubescale_neighbor_nodes_above_warning:sum',
            expr: |||
              count by (%(clusterLabel)s, family) (node_family:kubescale_neighbor_usage_high:ratio > %(neighborUsageWarning)g)
              or on (%(clusterLabel)s, family)
              0 * cluster_family:kubescale_neighbor_nodes:count
            ||| % $._config,
          },
          {
            record: 'cluster_family:kubescale_neighbor_nodes_at_kernel_default:sum',
            expr: 'sum by (%(clusterLabel)s, family) (kubescale_neighbor_gc_thresh3{%(nodeExporterSelector)s} <= bool %(neighborKernelDefaultThresh3)d)' % $._config,
          },
        ],
      },
    ],
  },
}
