// Prometheus protecting itself: at 7,500 nodes an unbudgeted series or query is what takes
// monitoring down (OOM, then a WAL replay long enough to look like an outage).
{
  prometheusAlerts+:: {
    groups+: [
      {
        local c = $._config,
        local pod = '%(clusterLabel)s, namespace, pod' % c,
        name: 'kube-scale-exporter-prometheus',
        rules: [
          {
            // The trend only counts after an hour of uptime: the head refilling after a
            // restart is a steep ramp, not growth.
            alert: 'KubeScalePrometheusHeadSeriesNearBudget',
            expr: |||
              prometheus_tsdb_head_series{%(prometheusSelector)s} > %(prometheusHeadSeriesWarning)g * %(prometheusHeadSeriesBudget)d
              or
              (
                predict_linear(prometheus_tsdb_head_series{%(prometheusSelector)s}[1h], %(prometheusHeadSeriesPredictHours)d * 3600) > %(prometheusHeadSeriesBudget)d
                and
                time() - process_start_time_seconds{%(prometheusSelector)s} > 3600
              )
            ||| % c,
            'for': c.prometheusHeadSeriesFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'Prometheus head series approach the budget it is sized for.',
              description: 'Prometheus {{ $labels.instance }} holds {{ $value | humanize }} head series (or is on course to), against a budget of %(prometheusHeadSeriesBudget)d.' % c,
            },
          },
          {
            alert: 'KubeScalePrometheusMemoryNearLimit',
            expr: |||
              max by (%s) (container_memory_working_set_bytes{%s})
              /
              max by (%s) (container_spec_memory_limit_bytes{%s} > 0)
              > %g
            ||| % [pod, c.prometheusContainerSelector, pod, c.prometheusContainerSelector, c.prometheusMemoryWarning],
            'for': c.prometheusMemoryFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'Prometheus memory is close to its container limit.',
              description: 'Prometheus pod {{ $labels.namespace }}/{{ $labels.pod }} uses {{ $value | humanizePercentage }} of its memory limit.',
            },
          },
          {
            // The gauge keeps its value for the process' life; alert only in the hour after.
            alert: 'KubeScalePrometheusSlowWALReplay',
            expr: |||
              prometheus_tsdb_data_replay_duration_seconds{%(prometheusSelector)s} > %(prometheusReplaySeconds)d
              and
              time() - process_start_time_seconds{%(prometheusSelector)s} < 3600
            ||| % c,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'Prometheus took long to replay its WAL at startup.',
              description: 'Prometheus {{ $labels.instance }} spent {{ $value | humanizeDuration }} replaying its WAL before it could scrape.',
            },
          },
          {
            // 422 is what the query API answers for execution errors, chiefly
            // "query processing would load too many samples into memory".
            alert: 'KubeScalePrometheusQueriesHitSampleLimit',
            expr: |||
              sum by (%(clusterLabel)s, job, instance) (
                increase(prometheus_http_requests_total{%(prometheusSelector)s, handler=~"/api/v1/query|/api/v1/query_range", code="422"}[%(rateInterval)s])
              ) > 0
            ||| % c,
            'for': c.prometheusQueryLimitFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'Queries fail on Prometheus, most likely at the --query.max-samples limit.',
              description: 'Prometheus {{ $labels.instance }} refused {{ $value | humanize }} queries with HTTP 422 in the last %(rateInterval)s.' % c,
            },
          },
        ],
      },
    ],
  },
}
