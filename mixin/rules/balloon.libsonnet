// Balloon (overprovisioning) headroom per cluster. The collector runs in the single-replica
// cluster-mode Deployment; `max by` keeps a rolling update's two pods from double counting.
// Gauges are held over gapTolerance: the pod restarting (its collector fails until its
// watches have listed again) or a lost scrape leaves no hole for an alert's `for`.
local groups = import '../lib/groups.libsonnet';
local promql = import '../lib/promql.libsonnet';
local slow = groups.slow;
{
  prometheusRules+:: {
    // What only dashboards and the 15 min KubeScaleBalloonMisconfigured read (slow): on
    // slowInterval, in kube-scale-exporter-balloon-views.rules.
    groups+: groups.split($._config, [
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
          slow({
            record: 'cluster_resource_unit:kubescale_balloon_reserved:max',
            expr: 'max by (%s, resource, unit) (%s)' % [c.clusterLabel, held('kubescale_balloon_reserved')],
          }),
          slow({
            record: 'cluster:kubescale_balloon_nodes:max',
            expr: 'max by (%s) (%s)' % [c.clusterLabel, held('kubescale_balloon_nodes')],
          }),
          slow({
            record: 'cluster:kubescale_balloon_preemptions:rate%(rateInterval)s' % c,
            expr: 'max by (%(clusterLabel)s) (rate(kubescale_balloon_preemptions_total{%(clusterExporterSelector)s}[%(rateInterval)s]))' % c,
          }),
          slow({
            record: 'cluster_reason:kubescale_balloon_misconfigured:max',
            expr: 'max by (%s, reason) (%s)' % [c.clusterLabel, held('kubescale_balloon_misconfigured')],
          }),
        ],
      },
    ]),
  },
}
