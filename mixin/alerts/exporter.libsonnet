// The exporter itself: targets down as a share of the fleet (one alert per job, never one per
// node), collectors failing, and targets exposing more series than budgeted.
{
  prometheusAlerts+:: {
    groups+: [
      {
        local c = $._config,
        name: 'kube-scale-exporter-exporter',
        rules: [
          {
            alert: 'KubeScaleExporterTargetsDown',
            expr: '1 - cluster_job:kubescale_exporter_up:avg > %(exporterDownRatio)g' % c,
            'for': c.exporterDownFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'A share of kube-scale-exporter targets cannot be scraped.',
              description: '{{ $value | humanizePercentage }} of the {{ $labels.job }} targets are down.',
            },
          },
          {
            alert: 'KubeScaleCollectorFailing',
            expr: 'cluster_job_collector:kubescale_scrape_collector_failures:sum > 0',
            'for': c.collectorFailingFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'A kube-scale-exporter collector fails; its metrics are missing.',
              description: 'The {{ $labels.collector }} collector fails on {{ $value }} {{ $labels.job }} targets.',
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
          {
            alert: 'KubeScaleExporterSeriesOverBudget',
            expr: |||
              max by (%(clusterLabel)s, job) (scrape_samples_scraped{%(nodeExporterSelector)s} unless on (%(clusterLabel)s, job, instance) kubescale_etcd_up{%(nodeExporterSelector)s}) > %(nodeSeriesBudget)d
              or
              max by (%(clusterLabel)s, job) (scrape_samples_scraped{%(nodeExporterSelector)s} and on (%(clusterLabel)s, job, instance) kubescale_etcd_up{%(nodeExporterSelector)s}) > %(etcdNodeSeriesBudget)d
              or
              max by (%(clusterLabel)s, job) (scrape_samples_scraped{%(clusterExporterSelector)s}) > %(clusterSeriesBudget)d
            ||| % c,
            'for': c.seriesBudgetFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'kube-scale-exporter exposes more series per target than budgeted.',
              description: 'A {{ $labels.job }} target exposes {{ $value }} samples per scrape, over its budget.',
            },
          },
        ],
      },
    ],
  },
}
