// Neighbor (ARP/NDISC) tables: once gc_thresh3 entries are GC-eligible the kernel drops new
// neighbors and pods on the node lose connectivity ("neighbor table overflow" in dmesg).
local text = import '../lib/alerts.libsonnet';
{
  prometheusAlerts+:: {
    groups+: [
      {
        local c = $._config,
        local nearFull(severity, threshold) = {
          alert: 'KubeScaleNeighborTableNearFull',
          // The tables above the lower of the two thresholds, held over gapTolerance.
          expr: 'node_family:kubescale_neighbor_usage_high:ratio > %g' % threshold,
          'for': c.neighborUsageFor,
          labels: { severity: severity },
          annotations: {
            summary: 'A neighbor table is close to gc_thresh3; the kernel will start dropping neighbors.',
            description: 'The {{ $labels.family }} neighbor table on node {{ $labels.%s }} uses {{ $value | humanizePercentage }} of gc_thresh3.' % c.nodeLabel,
          },
        },
        // Nodes on the kernel default that already use a good share of it.
        // Over the nodeAlertInterval records of every node's tables: on that interval too.
        name: 'kube-scale-exporter-neighbor',
        interval: c.nodeAlertInterval,
        rules: [
          nearFull(c.warningSeverity, c.neighborUsageWarning),
          nearFull(c.criticalSeverity, c.neighborUsageCritical),
          {
            // An overflow is packets to new peers dropped now: it ranks with the critical
            // NearFull, never below it.
            alert: 'KubeScaleNeighborTableOverflow',
            expr: 'node_family:kubescale_neighbor_table_overflows:increase%(rateInterval)s > 0' % c,
            labels: { severity: c.criticalSeverity },
            annotations: {
              summary: 'The kernel neighbor table overflowed: new neighbors were dropped.',
              description: 'The {{ $labels.family }} neighbor table on node {{ $labels.%(nodeLabel)s }} overflowed {{ $value | humanize }} times in the last %(rateInterval)s.' % c,
            },
          },
        ],
      },
      {
        local c = $._config,
        // `matchers` narrow both sides: the examples read only their alert's cluster and
        // family (text.examples' args: 1 the cluster, 2 the family), not every table's.
        local atKernelDefault(selector=c.nodeExporterSelector, matchers='') = |||
          node_family:kubescale_neighbor_usage:ratio%(matchers)s > %(neighborKernelDefaultUsage)g
          and
          last_over_time(kubescale_neighbor_gc_thresh3{%(selector)s}[%(gapTolerance)s]) <= %(neighborKernelDefaultThresh3)d
        ||| % (c { selector: std.join(', ', [selector] + (if matchers == '' then [] else [matchers])), matchers: if matchers == '' then '' else '{%s}' % matchers }),
        local ownTables = "%s='%%[1]s', family='%%[2]s'" % c.clusterLabel,
        // An hour-long `for`: on slowInterval.
        name: 'kube-scale-exporter-neighbor-slow',
        interval: c.slowInterval,
        rules: [
          {
            // A node image ships the same sysctls to every node: one alert per cluster and
            // family with the count and a few examples, not one per node.
            alert: 'KubeScaleNeighborThresholdsAtKernelDefault',
            expr: 'count by (%(clusterLabel)s, family) (%(expr)s)' % (c { expr: std.rstripChars(atKernelDefault(), '\n') }),
            'for': c.neighborKernelDefaultFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'Busy nodes still run the kernel default neighbor table thresholds.',
              description: ('{{ $value }} nodes have {{ $labels.family }} gc_thresh3 at the kernel default (%d) and use more than %s of it, e.g. '
                            % [c.neighborKernelDefaultThresh3, '%g%%' % (100 * c.neighborKernelDefaultUsage)])
                           + text.examples(atKernelDefault(text.literal(c.nodeExporterSelector), ownTables), '%s, family' % c.clusterLabel, c.nodeLabel, c.alertExamples, args=['$labels.%s' % c.clusterLabel, '$labels.family']) + '.',
            },
          },
        ],
      },
    ],
  },
}
