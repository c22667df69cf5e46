// The exporter itself: targets down as a share of the fleet (one alert per job, never one per
// node), targets gone altogether, collectors failing, and targets exposing more series than
// budgeted. These are the "we cannot see it" companions of the node and cluster signals.
local text = import '../lib/alerts.libsonnet';
{
  prometheusAlerts+:: {
    groups+: [
      {
        local c = $._config,
        local job = '%(clusterLabel)s, job' % c,
        // A job has targets in a cluster while the exporter rules count them (one series per
        // cluster and job, not every target's `up`).
        local present(jobName) = 'group by (%s) (cluster_job:kubescale_exporter_targets:count{job="%s"})' % [c.clusterLabel, jobName],
        // `for` of 15 minutes (exporterDownFor, kubeWatchDownFor) over the counts
        // exporter.rules records on slowInterval: on slowInterval too.
        name: 'kube-scale-exporter-exporter',
        interval: c.slowInterval,
        rules: [
          {
            // Whole targets against the job's size, with >=: a DaemonSet rollout stuck at its
            // maxUnavailable (twice the default ratio) alerts whatever the float rounding.
            alert: 'KubeScaleExporterTargetsDown',
            expr: |||
              cluster_job:kubescale_exporter_targets_down:sum
              >= %(exporterDownRatio)g * cluster_job:kubescale_exporter_targets:count
              and
              cluster_job:kubescale_exporter_targets_down:sum > 0
            ||| % c,
            'for': c.exporterDownFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'A share of kube-scale-exporter targets cannot be scraped.',
              // No examples: every down target has the same value, so which few topk picks is
              // arbitrary; the targets page lists them all.
              description: '{{ $value }} {{ $labels.job }} targets are down, at least %g%% of the job (Status > Targets lists them).' % (100 * c.exporterDownRatio),
            },
          },
          {
            // A target that is not even there (the cluster-mode pod Pending or evicted, the
            // DaemonSet deleted, the whole install pruned) has no `up` series: a cluster where
            // one of our two jobs reports and the other does not; a cluster that reported in
            // the last notObservedLookback and has no target now, judged per clusterLabel value
            // so that other clusters in one store (Thanos, Mimir, VictoriaMetrics) hide none;
            // or none of our targets at all. The lookback reads the per-job target counts the
            // exporter rules record, a few series per cluster, not every target's `up`.
            alert: 'KubeScaleExporterTargetMissing',
            expr: |||
              label_replace(%(node)s unless on (%(clusterLabel)s) %(cluster)s, "mode", "cluster", "", "")
              or
              label_replace(%(cluster)s unless on (%(clusterLabel)s) %(node)s, "mode", "node", "", "")
              or
              (
                group by (%(clusterLabel)s) (last_over_time(cluster_job:kubescale_exporter_targets:count[%(notObservedLookback)s]))
                unless on (%(clusterLabel)s)
                cluster_job:kubescale_exporter_targets:count
              )
              or
              absent(cluster_job:kubescale_exporter_targets:count)
            ||| % (c { node: present(c.nodeJobName), cluster: present(c.clusterJobName) }),
            'for': c.exporterDownFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'No kube-scale-exporter target to scrape: what it watches is unseen.',
              description: ('{{ if $labels.mode }}No {{ $labels.mode }}-mode kube-scale-exporter target exists in cluster {{ $labels.%(clusterLabel)s }} while the other mode reports: its pods are Pending, evicted or gone.'
                            + '{{ else if $labels.%(clusterLabel)s }}Cluster {{ $labels.%(clusterLabel)s }} reported kube-scale-exporter targets in the last %(notObservedLookback)s and has none now: its install was removed (pruned, its namespace deleted) or its scrape configuration lost.'
                            + '{{ else }}No kube-scale-exporter target exists at all (no `up` series for %(exporterSelector)s).{{ end }}') % c,
            },
          },
          {
            alert: 'KubeScaleKubeWatchDown',
            expr: 'cluster_job_resource:kubescale_kube_watches_down:sum > 0',
            'for': c.kubeWatchDownFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'The exporter cannot watch the Kubernetes API; metrics built on it are stale.',
              description: 'The {{ $labels.resource }} watch is down on {{ $value }} {{ $labels.job }} targets.',
            },
          },
        ],
      },
      {
        local c = $._config,
        local job = '%(clusterLabel)s, job' % c,
        local target = [c.nodeLabel, 'instance'],
        // Targets whose collector failed more than collectorFailingRatio of its scrapes over
        // rateInterval. Read here, not recorded: a recording rule of it would create a series
        // per node when a collector fails fleet-wide. Like the neighbor alerts' increase(), it
        // reads rateInterval of each target's raw series (7,500 x 4 series, 10 samples each
        // at 30 s scrapes).
        local failing = '1 - avg_over_time(kubescale_scrape_collector_success{%(exporterSelector)s}[%(rateInterval)s]) > %(collectorFailingRatio)g' % c,
        // A failed scrape (a timeout) reports 0 samples and no etcd series: the samples are the
        // most scraped within gapTolerance, so a target over budget that also times out now
        // and then does not reset the `for`.
        local overBudget = |||
          (max_over_time(scrape_samples_scraped{%(nodeExporterSelector)s}[%(gapTolerance)s]) unless on (%(clusterLabel)s, job, instance) last_over_time(kubescale_etcd_up{%(nodeExporterSelector)s}[%(gapTolerance)s])) > %(nodeSeriesBudget)d
          or
          (max_over_time(scrape_samples_scraped{%(nodeExporterSelector)s}[%(gapTolerance)s]) and on (%(clusterLabel)s, job, instance) last_over_time(kubescale_etcd_up{%(nodeExporterSelector)s}[%(gapTolerance)s])) > %(etcdNodeSeriesBudget)d
          or
          max_over_time(scrape_samples_scraped{%(clusterExporterSelector)s}[%(gapTolerance)s]) > %(clusterSeriesBudget)d
        ||| % c,
        // `for` of 15 minutes and more, over every target's raw series: on slowInterval.
        name: 'kube-scale-exporter-exporter-slow',
        interval: c.slowInterval,
        rules: [
          {
            // The share of failed scrapes over a window, per target: a collector that
            // succeeds now and then still alerts when it fails most of the time.
            alert: 'KubeScaleCollectorFailing',
            expr: 'count by (%s, job, collector) (%s)' % [c.clusterLabel, failing],
            'for': c.collectorFailingFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'A kube-scale-exporter collector fails; its metrics are missing.',
              description: ('The {{ $labels.collector }} collector failed more than %g%% of its scrapes in the last %s on {{ $value }} {{ $labels.job }} targets: '
                            % [100 * c.collectorFailingRatio, c.rateInterval])
                           + text.examples(failing, '%s, collector' % job, target, c.alertExamples, 'instance') + '.',
            },
          },
          {
            alert: 'KubeScaleExporterSeriesOverBudget',
            expr: 'max by (%s) (\n  %s\n)\n' % [job, std.strReplace(std.rstripChars(overBudget, '\n'), '\n', '\n  ')],
            'for': c.seriesBudgetFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'A kube-scale-exporter target exposes more series than budgeted.',
              description: 'The largest {{ $labels.job }} target over its budget exposes {{ $value }} samples per scrape; over budget: '
                           + text.examples(overBudget, job, target, c.alertExamples, 'instance') + '.',
            },
          },
        ],
      },
    ],
  },
}
