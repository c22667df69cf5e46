// etcd backend quota: at the quota etcd raises NOSPACE and refuses every write, and the
// Kubernetes control plane stops working until someone compacts, defragments and disarms.
{
  prometheusAlerts+:: {
    groups+: [
      {
        local c = $._config,
        local nearQuota(severity, threshold) = {
          alert: 'KubeScaleEtcdDatabaseNearQuota',
          expr: 'etcd_cluster_member:kubescale_etcd_quota_usage:ratio > %g' % threshold,
          'for': c.etcdQuotaFor,
          labels: { severity: severity },
          annotations: {
            summary: 'An etcd database is close to its backend quota.',
            description: 'etcd member {{ $labels.member }} of {{ $labels.etcd_cluster }} uses {{ $value | humanizePercentage }} of its backend quota.',
          },
        },
        name: 'kube-scale-exporter-etcd',
        rules: [
          nearQuota(c.warningSeverity, c.etcdQuotaWarning),
          nearQuota(c.criticalSeverity, c.etcdQuotaCritical),
          {
            alert: 'KubeScaleEtcdDatabaseQuotaPredictedFull',
            expr: |||
              predict_linear(etcd_cluster_member:kubescale_etcd_db_size_bytes:max[%(etcdPredictWindow)s], %(etcdPredictHours)d * 3600)
              >= etcd_cluster_member:kubescale_etcd_quota_bytes:max
            ||| % c,
            'for': c.etcdPredictFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'An etcd database is predicted to reach its backend quota within hours.',
              description: 'At the growth of the last %(etcdPredictWindow)s, etcd member {{ $labels.member }} of {{ $labels.etcd_cluster }} reaches its backend quota within %(etcdPredictHours)d hours.' % c,
            },
          },
          {
            alert: 'KubeScaleEtcdAlarmActive',
            expr: 'etcd_cluster_member_alarm:kubescale_etcd_alarm_active:max > 0',
            'for': c.etcdAlarmFor,
            labels: { severity: c.criticalSeverity },
            annotations: {
              summary: 'An etcd alarm is active; with NOSPACE etcd refuses writes.',
              description: 'etcd member {{ $labels.member }} of {{ $labels.etcd_cluster }} has the {{ $labels.alarm }} alarm raised.',
            },
          },
          {
            alert: 'KubeScaleEtcdHighFragmentation',
            expr: |||
              etcd_cluster_member:kubescale_etcd_fragmentation:ratio > %(etcdFragmentationRatio)g
              and
              etcd_cluster_member:kubescale_etcd_db_size_bytes:max > %(etcdFragmentationMinBytes)d
            ||| % c,
            'for': c.etcdFragmentationFor,
            labels: { severity: c.infoSeverity },
            annotations: {
              summary: 'Much of an etcd database file is free pages; a defragmentation would reclaim it.',
              description: '{{ $value | humanizePercentage }} of the database file of etcd member {{ $labels.member }} of {{ $labels.etcd_cluster }} is free pages.',
            },
          },
          {
            alert: 'KubeScaleEtcdEventsInMainEtcd',
            expr: 'etcd_cluster:kubescale_etcd_events_keys:ratio{etcd_cluster!="%(etcdEventsClusterName)s"} > %(etcdEventsShare)g' % c,
            'for': c.etcdEventsFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'Events take a large share of an etcd that should not hold them.',
              description: 'Events are {{ $value | humanizePercentage }} of the keys in etcd cluster {{ $labels.etcd_cluster }}; move them to their own etcd with --etcd-servers-overrides.',
            },
          },
        ],
      },
    ],
  },
}
