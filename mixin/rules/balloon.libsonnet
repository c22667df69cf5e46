// Balloon (overprovisioning) headroom per cluster. The collector runs in the single-replica
// cluster-mode Deployment; `max by` keeps a rolling update's two pods from double counting.
// Gauges are held over gapTolerance: the pod restarting (its collector fails until its
// watches have listed again) or a lost scrape leaves no hole for an alert's `for`.
local promql = import '../lib/promql.libsonnet';
{
  prometheusRules+:: {
    groups+: [
      {
        local c = $._config,
        local held(metric) = promql.held(metric, c.clusterExporterSelector, c.gapTolerance),
        name: 'kube-scale-exporter-balloon.rules',
        rules: [
          {
            record: 'cluster_phase:kubescale_balloon_pods:max',
            expr: 'max by (%s, phase) (%s)' % [c.clusterLabel, held('kubescale_balloon_pods')],
          },
          {
            record: 'cluster:kubescale_balloon_pending_oldest_seconds:max',
            expr: 'max by (%s) (%s)' % [c.clusterLabel, held('kubescale_balloon_pending_oldest_seconds')],
          },
          {
            record: 'cluster_resource_unit:kubescale_balloon_reserved:max',
            expr: 'max by (%s, resource, unit) (%s)' % [c.clusterLabel, held('kubescale_balloon_reserved')],
          },
          {
            record: 'cluster:kubescale_balloon_nodes:max',
            expr: 'max by (%s) (%s)' % [c.clusterLabel, held('kubescale_balloon_nodes')],
          },
          {
            record: 'cluster:kubescale_balloon_preemptions:rate%(rateInterval)s' % c,
            expr: 'max by (%(clusterLabel)s) (rate(kubescale_balloon_preemptions_total{%(clusterExporterSelector)s}[%(rateInterval)s]))' % c,
          },
          {
            record: 'cluster_reason:kubescale_balloon_misconfigured:max',
            expr: 'max by (%s, reason) (%s)' % [c.clusterLabel, held('kubescale_balloon_misconfigured')],
          },
        ],
      },
    ],
  },
}
