// etcd capacity and performance per cluster and member. `max by` removes the exporter's
// target labels, so several exporters (or Prometheus replicas' views) of one member collapse to one series.
// `last_over_time` over gapTolerance bridges a scrape or two without a member's series (a
// slow Status call), so the alerts reading these rules keep their `for`.
{
  prometheusRules+:: {
    groups+: [
      {
        local c = $._config,
        local member = '%(clusterLabel)s, etcd_cluster, member' % c,
        local last(metric) = 'last_over_time(%s{%s}[%s])' % [metric, c.etcdSelector, c.gapTolerance],
        local rate(metric) = 'rate(%s{%s}[%s])' % [metric, c.etcdSelector, c.rateInterval],
        name: 'kube-scale-exporter-etcd.rules',
        rules: [
          {
            record: 'etcd_cluster_member:kubescale_etcd_db_size_bytes:max',
            expr: 'max by (%s) (%s)' % [member, last('kubescale_etcd_db_size_bytes')],
          },
          {
            record: 'etcd_cluster_member:kubescale_etcd_quota_bytes:max',
            expr: 'max by (%s) (%s)' % [member, last('kubescale_etcd_quota_bytes')],
          },
          {
            record: 'etcd_cluster_member:kubescale_etcd_db_size_in_use_bytes:max',
            expr: 'max by (%s) (%s)' % [member, last('kubescale_etcd_db_size_in_use_bytes')],
          },
          {
            record: 'etcd_cluster_member:kubescale_etcd_quota_usage:ratio',
            expr: |||
              etcd_cluster_member:kubescale_etcd_db_size_bytes:max
              /
              etcd_cluster_member:kubescale_etcd_quota_bytes:max
            |||,
          },
          {
            // Share of the file that is free pages: what a defragmentation gives back.
            record: 'etcd_cluster_member:kubescale_etcd_fragmentation:ratio',
            expr: |||
              1 - etcd_cluster_member:kubescale_etcd_db_size_in_use_bytes:max
              / etcd_cluster_member:kubescale_etcd_db_size_bytes:max
            |||,
          },
          {
            record: 'etcd_cluster_member:kubescale_etcd_db_size_bytes:deriv1h',
            expr: 'deriv(etcd_cluster_member:kubescale_etcd_db_size_bytes:max[1h])',
          },
          {
            // Only where the database grows; a shrinking or flat one never reaches its quota.
            // Zero once over the quota (etcd overshoots it by the write that raised NOSPACE).
            record: 'etcd_cluster_member:kubescale_etcd_seconds_to_quota:deriv1h',
            expr: |||
              clamp_min(
                etcd_cluster_member:kubescale_etcd_quota_bytes:max
                - etcd_cluster_member:kubescale_etcd_db_size_bytes:max,
                0
              )
              / (etcd_cluster_member:kubescale_etcd_db_size_bytes:deriv1h > 0)
            |||,
          },
          {
            record: 'etcd_cluster_member_alarm:kubescale_etcd_alarm_active:max',
            expr: 'max by (%s, alarm) (%s)' % [member, last('kubescale_etcd_alarm_active')],
          },
          {
            record: 'etcd_cluster:kubescale_etcd_leaders:sum',
            expr: |||
              sum by (%(clusterLabel)s, etcd_cluster) (
                max by (%(clusterLabel)s, etcd_cluster, member) (kubescale_etcd_is_leader{%(etcdSelector)s})
              )
            ||| % c,
          },
          {
            record: 'etcd_cluster_resource:kubescale_etcd_keys:max',
            expr: 'max by (%(clusterLabel)s, etcd_cluster, resource) (kubescale_etcd_keys{%(etcdSelector)s})' % c,
          },
          {
            // Key share, not byte share: counting keys needs no values read, and
            // events are small and numerous, so their key share is the telling one.
            record: 'etcd_cluster:kubescale_etcd_events_keys:ratio',
            expr: |||
              sum by (%(clusterLabel)s, etcd_cluster) (etcd_cluster_resource:kubescale_etcd_keys:max{resource="events"})
              /
              sum by (%(clusterLabel)s, etcd_cluster) (etcd_cluster_resource:kubescale_etcd_keys:max)
            ||| % c,
          },
          // Performance per member, from each member's own /metrics. The rate is taken per
          // exporter series, then `max by` collapses several exporters of one member; a
          // member restart resets its counters, which rate() treats as a reset, not a drop.
          {
            record: 'etcd_cluster_member:kubescale_etcd_wal_fsync_duration_seconds:p99_rate%(rateInterval)s' % c,
            expr: 'histogram_quantile(0.99, max by (%s, le) (%s))' % [member, rate('kubescale_etcd_wal_fsync_duration_seconds_bucket')],
          },
          {
            record: 'etcd_cluster_member:kubescale_etcd_backend_commit_duration_seconds:p99_rate%(rateInterval)s' % c,
            expr: 'histogram_quantile(0.99, max by (%s, le) (%s))' % [member, rate('kubescale_etcd_backend_commit_duration_seconds_bucket')],
          },
          {
            // What the member sends its clients per second: the kube-apiservers' reads.
            record: 'etcd_cluster_member:kubescale_etcd_client_sent_bytes:rate%(rateInterval)s' % c,
            expr: 'max by (%s) (%s)' % [member, rate('kubescale_etcd_client_sent_bytes_total')],
          },
          {
            record: 'etcd_cluster_member:kubescale_etcd_range_requests:rate%(rateInterval)s' % c,
            expr: 'max by (%s) (%s)' % [member, rate('kubescale_etcd_range_requests_total')],
          },
          {
            // Writes refused for space (NOSPACE) or overload: what a pod without etcd's key
            // sees of a raised alarm.
            record: 'etcd_cluster_member:kubescale_etcd_writes_refused:rate%(rateInterval)s' % c,
            expr: 'max by (%s) (%s)' % [member, rate('kubescale_etcd_writes_refused_total')],
          },
        ],
      },
    ],
  },
}
