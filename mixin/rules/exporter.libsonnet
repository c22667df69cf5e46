// The exporter's own health per job: targets up, collectors failing, series per target.
local promql = import '../lib/promql.libsonnet';
{
  prometheusRules+:: {
    groups+: [
      {
        local c = $._config,
        local both(metric) = '(%s{%s})' % [metric, c.exporterSelector],
        local byUp = 'cluster_job_value:kubescale_exporter_up:count',
        local count = 'cluster_job:kubescale_exporter_targets:count',
        local orZero(expr) = '%s\nor on (%s, job)\n0 * %s' % [expr, c.clusterLabel, count],
        // Read by the dashboards and by the exporter alerts, whose `for` is 15 minutes: on
        // slowInterval (every target's `up` and watch state, 15,000 series at 7,500 nodes).
        name: 'kube-scale-exporter-exporter.rules',
        interval: c.slowInterval,
        rules: [
          {
            // Every target's `up` read once: targets per cluster, job and `up` value (0 or 1, in `value`),
            // from which the rules below take the job's size, its down targets and its average.
            record: byUp,
            expr: 'count_values by (%s, job) ("value", %s)' % [c.clusterLabel, both('up')],
          },
          {
            record: count,
            expr: 'sum without (value) (%s)' % byUp,
          },
          {
            record: 'cluster_job:kubescale_exporter_up:avg',
            expr: '(\n  %s\n)\n/ %s' % [std.strReplace(orZero('sum without (value) (%s{value="1"})' % byUp), '\n', '\n  '), count],
          },
          {
            // Counted, not averaged: the alert compares whole targets with the job's size.
            record: 'cluster_job:kubescale_exporter_targets_down:sum',
            expr: orZero('sum without (value) (%s{value="0"})' % byUp),
          },
          {
            // Kubernetes API watches (informers) that are down: their collectors serve stale data.
            // Held over gapTolerance: KubeScaleKubeWatchDown holds this through its `for`, and
            // a watch stays down across our pod's restart (it lists again only once the API
            // answers), so neither a lost scrape nor the restart's gap is the watch coming back.
            // The cluster-mode Deployment's watches are counted from the pods that serve them
            // now, held only while none does: a pod replaced under a new instance label (the
            // usual cure for a stuck watch) gives way to its successor's watches at once. Node
            // targets, one per node, are each held on their own.
            local down(read) = 'sum by (%s, job, resource) (%s == bool 0)' % [c.clusterLabel, read],
            local watch(selector) = 'kubescale_kube_watch_up{%s}' % selector,
            local held(selector) = promql.held('kubescale_kube_watch_up', selector, c.gapTolerance),
            record: 'cluster_job_resource:kubescale_kube_watches_down:sum',
            expr: promql.preferLive(
              down(watch(c.clusterExporterSelector)),
              down(held(c.clusterExporterSelector)),
              'on (%s, job) %s' % [c.clusterLabel, watch(c.clusterExporterSelector)],
            ) + 'or\n' + down(held(c.nodeExporterSelector)),
          },
        ],
      },
      {
        local c = $._config,
        local both(metric) = '(%s{%s})' % [metric, c.exporterSelector],
        // Views only dashboards read: on slowInterval.
        name: 'kube-scale-exporter-exporter-views.rules',
        interval: c.slowInterval,
        rules: [
          {
            record: 'cluster_job_collector:kubescale_scrape_collector_failures:sum',
            expr: 'sum by (%s, job, collector) (%s == bool 0)' % [c.clusterLabel, both('kubescale_scrape_collector_success')],
          },
          {
            record: 'cluster_job_collector:kubescale_scrape_collector_duration_seconds:max',
            expr: 'max by (%s, job, collector) %s' % [c.clusterLabel, both('kubescale_scrape_collector_duration_seconds')],
          },
          {
            record: 'cluster_job:kubescale_exporter_samples_scraped:max',
            expr: 'max by (%s, job) %s' % [c.clusterLabel, both('scrape_samples_scraped')],
          },
          {
            record: 'cluster_job_version:kubescale_build_info:count',
            expr: 'count by (%s, job, version) %s' % [c.clusterLabel, both('kubescale_build_info')],
          },
        ],
      },
    ],
  },
}
