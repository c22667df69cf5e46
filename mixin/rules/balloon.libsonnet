// Balloon (overprovisioning) headroom per cluster. The collector runs in the single-replica
// cluster-mode Deployment; `max by` keeps a rolling update's two pods from double counting.
// Each gauge is read from the pods that serve the collector's series now; only while none
// does (the pod restarting: its collector fails until its watches have listed again; a lost
// scrape) is it held over gapTolerance, so the hole does not reset an alert's `for`, while a
// replaced pod's last values give way to its successor's at once (promql.preferLive).
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
        // kubescale_balloon_nodes, one series, is served whenever the collector answers: its
        // absence is the "no pod answers" that the held values stand in for (`reserved` has
        // no series for a resource no Running balloon requests).
        local answers = 'on (%s) kubescale_balloon_nodes{%s}' % [c.clusterLabel, c.clusterExporterSelector],
        local read(by, metric) = promql.preferLive(
          'max by (%s) (%s{%s})' % [by, metric, c.clusterExporterSelector],
          'max by (%s) (%s)' % [by, promql.held(metric, c.clusterExporterSelector, c.gapTolerance)],
          answers,
        ),
        name: 'kube-scale-exporter-balloon.rules',
        rules: [
          {
            record: 'cluster_phase:kubescale_balloon_pods:max',
            expr: read('%s, phase' % c.clusterLabel, 'kubescale_balloon_pods'),
          },
          {
            record: 'cluster:kubescale_balloon_pending_oldest_seconds:max',
            expr: read(c.clusterLabel, 'kubescale_balloon_pending_oldest_seconds'),
          },
          slow({
            record: 'cluster_resource_unit:kubescale_balloon_reserved:max',
            expr: read('%s, resource, unit' % c.clusterLabel, 'kubescale_balloon_reserved'),
          }),
          slow({
            record: 'cluster:kubescale_balloon_nodes:max',
            expr: read(c.clusterLabel, 'kubescale_balloon_nodes'),
          }),
          slow({
            record: 'cluster:kubescale_balloon_preemptions:rate%(rateInterval)s' % c,
            expr: 'max by (%(clusterLabel)s) (rate(kubescale_balloon_preemptions_total{%(clusterExporterSelector)s}[%(rateInterval)s]))' % c,
          }),
          slow({
            record: 'cluster_reason:kubescale_balloon_misconfigured:max',
            expr: read('%s, reason' % c.clusterLabel, 'kubescale_balloon_misconfigured'),
          }),
        ],
      },
    ]),
  },
}
