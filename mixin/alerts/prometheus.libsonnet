// Prometheus protecting itself: at 7,500 nodes an unbudgeted series or query is what takes
// monitoring down (OOM, then a WAL replay long enough to look like an outage). Opt-in
// (prometheusSelfProtection): most stacks already run prometheus-mixin's alerts. Gauges held
// through a `for` are read over gapTolerance: a lost self-scrape or a cAdvisor scrape timing
// out (common on busy nodes) does not reset it.
local promql = import '../lib/promql.libsonnet';
{
  prometheusAlerts+:: {
    groups+: if !$._config.prometheusSelfProtection then [] else [
      {
        local c = $._config,
        local pod = '%(clusterLabel)s, namespace, pod' % c,
        local held(metric, selector=c.prometheusSelector) = promql.held(metric, selector, c.gapTolerance),
        name: 'kube-scale-exporter-prometheus',
        rules: [
          {
            // The trend is taken over the head's peaks (max over one head cycle), so the
            // saw-tooth of series churn (a head that fills for 2h and drops at compaction) is
            // not growth; it only counts after an hour of uptime, when the head refilling
            // after a restart is behind. The value is always the current count.
            alert: 'KubeScalePrometheusHeadSeriesNearBudget',
            expr: |||
              %(head)s > %(prometheusHeadSeriesWarning)g * %(prometheusHeadSeriesBudget)d
              or
              (
                %(head)s
                and
                predict_linear(max_over_time(prometheus_tsdb_head_series{%(prometheusSelector)s}[%(prometheusHeadCycle)s])[%(prometheusHeadSeriesPredictWindow)s:5m], %(prometheusHeadSeriesPredictHours)d * 3600) > %(prometheusHeadSeriesBudget)d
                and
                time() - %(started)s > 3600
              )
            ||| % (c { head: held('prometheus_tsdb_head_series'), started: held('process_start_time_seconds') }),
            'for': c.prometheusHeadSeriesFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'Prometheus head series approach the budget it is sized for.',
              description: 'Prometheus {{ $labels.instance }} holds {{ $value | humanize }} head series, against a budget of %(prometheusHeadSeriesBudget)d: above %(warning)s of it, or on course to exceed it within %(prometheusHeadSeriesPredictHours)d hours at the growth of its peaks over the last %(prometheusHeadSeriesPredictWindow)s.' % (c { warning: '%g%%' % (100 * c.prometheusHeadSeriesWarning) }),
            },
          },
          {
            alert: 'KubeScalePrometheusMemoryNearLimit',
            expr: |||
              max by (%s) (%s)
              /
              max by (%s) (%s > 0)
              > %g
            ||| % [pod, held('container_memory_working_set_bytes', c.prometheusContainerSelector), pod, held('container_spec_memory_limit_bytes', c.prometheusContainerSelector), c.prometheusMemoryWarning],
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
            // 422 is what the query API answers for every execution error: the
            // --query.max-samples limit ("query processing would load too many samples into
            // memory") and others alike. No metric tells them apart, so all are counted.
            alert: 'KubeScalePrometheusQueriesHitSampleLimit',
            expr: |||
              sum by (%(clusterLabel)s, job, instance) (
                increase(prometheus_http_requests_total{%(prometheusSelector)s, handler=~"/api/v1/query|/api/v1/query_range", code="422"}[%(rateInterval)s])
              ) > 0
            ||| % c,
            'for': c.prometheusQueryLimitFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'Queries fail on Prometheus with execution errors (HTTP 422), such as the --query.max-samples limit.',
              description: 'Prometheus {{ $labels.instance }} answered {{ $value | humanize }} queries with HTTP 422 (all execution errors, the sample limit among them) in the last %(rateInterval)s.' % c,
            },
          },
          {
            // The "we cannot see it" companion: with a selector that matches nothing every
            // alert above is silent.
            alert: 'KubeScalePrometheusNotObserved',
            expr: 'absent(prometheus_tsdb_head_series{%(prometheusSelector)s})' % c,
            'for': c.prometheusHeadSeriesFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'No Prometheus matches the self-protection selector; its alerts are blind.',
              description: 'No prometheus_tsdb_head_series series matches {{ `%(prometheusSelector)s` }}: set prometheusSelector to the job that scrapes Prometheus itself.' % c,
            },
          },
        ],
      },
    ],
  },
}
