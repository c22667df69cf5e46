// etcd capacity per cluster and member. `max by` removes the exporter's target labels, so
// several exporters (or Prometheus replicas' views) of one member collapse to one series.
// `last_over_time` over gapTolerance bridges a scrape or two without a member's series (a
// slow Status call), so the alerts reading these rules keep their `for`.
{
  prometheusRules+:: {
    groups+: [
      {
        local c = $._config,
        local member = '%(clusterLabel)s, etcd_cluster, member' % c,
        local last(metric) = 'last_over_time(%s{%s}[%s])' % [metric, c.etcdSelector, c.gapTolerance],
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
        ],
      },
    ],
  },
}
