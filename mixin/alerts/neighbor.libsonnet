// Neighbor (ARP/NDISC) tables: once gc_thresh3 entries are GC-eligible the kernel drops new
// neighbors and pods on the node lose connectivity ("neighbor table overflow" in dmesg).
{
  prometheusAlerts+:: {
    groups+: [
      {
        local c = $._config,
        local nearFull(severity, threshold) = {
          alert: 'KubeScaleNeighborTableNearFull',
          expr: 'node_family:kubescale_neighbor_usage:ratio > %g' % threshold,
          'for': c.neighborUsageFor,
          labels: { severity: severity },
          annotations: {
            summary: 'A neighbor table is close to gc_thresh3; the kernel will start dropping neighbors.',
            description: 'The {{ $labels.family }} neighbor table on node {{ $labels.%s }} uses {{ $value | humanizePercentage }} of gc_thresh3.' % c.nodeLabel,
          },
        },
        name: 'kube-scale-exporter-neighbor',
        rules: [
          nearFull(c.warningSeverity, c.neighborUsageWarning),
          nearFull(c.criticalSeverity, c.neighborUsageCritical),
          {
            alert: 'KubeScaleNeighborTableOverflow',
            expr: 'increase(kubescale_neighbor_table_overflows_total{%(nodeExporterSelector)s}[%(rateInterval)s]) > 0' % c,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'The kernel neighbor table overflowed: new neighbors were dropped.',
              description: 'The {{ $labels.family }} neighbor table on node {{ $labels.%(nodeLabel)s }} overflowed {{ $value | humanize }} times in the last %(rateInterval)s.' % c,
            },
          },
          {
            alert: 'KubeScaleNeighborThresholdsAtKernelDefault',
            expr: |||
              node_family:kubescale_neighbor_usage:ratio > %(neighborKernelDefaultUsage)g
              and
              kubescale_neighbor_gc_thresh3{%(nodeExporterSelector)s} <= %(neighborKernelDefaultThresh3)d
            ||| % c,
            'for': c.neighborKernelDefaultFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'A busy node still runs the kernel default neighbor table thresholds.',
              description: 'Node {{ $labels.%s }} has {{ $labels.family }} gc_thresh3 at the kernel default (%d) and already uses {{ $value | humanizePercentage }} of it.' % [c.nodeLabel, c.neighborKernelDefaultThresh3],
            },
          },
        ],
      },
    ],
  },
}
