// Balloon (overprovisioning) headroom per cluster. The collector runs in the single-replica
// cluster-mode Deployment; `max by` keeps a rolling update's two pods from double counting.
{
  prometheusRules+:: {
    groups+: [
      {
        local c = $._config,
        name: 'kube-scale-exporter-balloon.rules',
        rules: [
          {
            record: 'cluster_phase:kubescale_balloon_pods:max',
            expr: 'max by (%(clusterLabel)s, phase) (kubescale_balloon_pods{%(clusterExporterSelector)s})' % c,
          },
          {
            record: 'cluster:kubescale_balloon_pending_oldest_seconds:max',
            expr: 'max by (%(clusterLabel)s) (kubescale_balloon_pending_oldest_seconds{%(clusterExporterSelector)s})' % c,
          },
          {
            record: 'cluster_resource_unit:kubescale_balloon_reserved:max',
            expr: 'max by (%(clusterLabel)s, resource, unit) (kubescale_balloon_reserved{%(clusterExporterSelector)s})' % c,
          },
          {
            record: 'cluster:kubescale_balloon_nodes:max',
            expr: 'max by (%(clusterLabel)s) (kubescale_balloon_nodes{%(clusterExporterSelector)s})' % c,
          },
          {
            record: 'cluster:kubescale_balloon_preemptions:rate%(rateInterval)s' % c,
            expr: 'max by (%(clusterLabel)s) (rate(kubescale_balloon_preemptions_total{%(clusterExporterSelector)s}[%(rateInterval)s]))' % c,
          },
          {
            record: 'cluster_reason:kubescale_balloon_misconfigured:max',
            expr: 'max by (%(clusterLabel)s, reason) (kubescale_balloon_misconfigured{%(clusterExporterSelector)s})' % c,
          },
        ],
      },
    ],
  },
}
