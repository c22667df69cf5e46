// Fleet views of the kernel neighbor (ARP/NDISC) tables. Per node the usage ratio is kept
// (it feeds alerts and the "worst nodes" tables); everything else is per cluster and family.
{
  prometheusRules+:: {
    groups+: [
      {
        name: 'kube-scale-exporter-neighbor.rules',
        rules: [
          {
            // GC-eligible entries are what gc_thresh3 limits (config: neighborUsageMetric).
            // Held over gapTolerance: the near-full alerts hold this ratio through their `for`,
            // which a lost scrape (the dump of a huge table timing out) must not reset.
            record: 'node_family:kubescale_neighbor_usage:ratio',
            expr: |||
              last_over_time(%(neighborUsageMetric)s{%(nodeExporterSelector)s}[%(gapTolerance)s])
              /
              last_over_time(kubescale_neighbor_gc_thresh3{%(nodeExporterSelector)s}[%(gapTolerance)s])
            ||| % $._config,
          },
        ],
      },
      {
        // Apart from the usage ratio, so that neither group reads more than half the
        // node tables' samples of one evaluation.
        name: 'kube-scale-exporter-neighbor-overflows.rules',
        rules: [
          {
            // Only the nodes whose table overflowed: the overflow alert reads these.
            record: 'node_family:kubescale_neighbor_table_overflows:increase%(rateInterval)s' % $._config,
            expr: 'increase(kubescale_neighbor_table_overflows_total{%(nodeExporterSelector)s}[%(rateInterval)s]) > 0' % $._config,
          },
        ],
      },
      {
        // Fleet views only dashboards read: on slowInterval.
        name: 'kube-scale-exporter-neighbor-views.rules',
        interval: $._config.slowInterval,
        rules: [
          {
            record: 'cluster_family:kubescale_neighbor_usage:max',
            expr: 'max by (%(clusterLabel)s, family) (node_family:kubescale_neighbor_usage:ratio)' % $._config,
          },
          {
            // The overview's "worst nodes" table: bounded to topK series per cluster and family.
            record: 'node_family:kubescale_neighbor_usage:topk%(topK)d' % $._config,
            expr: 'topk by (%(clusterLabel)s, family) (%(topK)d, node_family:kubescale_neighbor_usage:ratio)' % $._config,
          },
          {
            record: 'cluster_family:kubescale_neighbor_nodes_above_warning:sum',
            expr: 'sum by (%(clusterLabel)s, family) (node_family:kubescale_neighbor_usage:ratio > bool %(neighborUsageWarning)g)' % $._config,
          },
          {
            record: 'cluster_family:kubescale_neighbor_nodes:count',
            expr: 'count by (%(clusterLabel)s, family) (kubescale_neighbor_gc_thresh3{%(nodeExporterSelector)s})' % $._config,
          },
          {
            record: 'cluster_family:kubescale_neighbor_nodes_at_kernel_default:sum',
            expr: 'sum by (%(clusterLabel)s, family) (kubescale_neighbor_gc_thresh3{%(nodeExporterSelector)s} <= bool %(neighborKernelDefaultThresh3)d)' % $._config,
          },
          {
            record: 'cluster_family:kubescale_neighbor_table_overflows:rate%(rateInterval)s' % $._config,
            expr: 'sum by (%(clusterLabel)s, family) (rate(kubescale_neighbor_table_overflows_total{%(nodeExporterSelector)s}[%(rateInterval)s]))' % $._config,
          },
          {
            record: 'cluster_family:kubescale_neighbor_forced_gc_runs:rate%(rateInterval)s' % $._config,
            expr: 'sum by (%(clusterLabel)s, family) (rate(kubescale_neighbor_forced_gc_runs_total{%(nodeExporterSelector)s}[%(rateInterval)s]))' % $._config,
          },
        ],
      },
    ],
  },
}
