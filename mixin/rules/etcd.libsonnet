// etcd capacity and performance per cluster and member. `max by` removes the exporter's
// target labels, so several exporters (or Prometheus replicas' views) of one member collapse
// to one series, and keeps the member's machine in nodeLabel: from the target of a pod beside
// its member, from the member's name where the cluster-mode Deployment reaches it over the
// network (config: etcdLocalSelector, etcdRemoteSelector). Every gauge is read from the pods
// that serve it now and, for a member none does, held over gapTolerance (promql.preferLive):
// a scrape or two without a member's series (a slow Status call, our exporter restarting)
// leaves no hole for the alerts reading these rules to reset their `for`, and a pod replaced
// under a new instance label gives way to its successor at once (an alarm disarmed, a leader
// moved, a quota corrected while the Deployment rolled).
local groups = import '../lib/groups.libsonnet';
local promql = import '../lib/promql.libsonnet';
local slow = groups.slow;
{
  prometheusRules+:: {
    local c = $._config,
    local member = '%s, etcd_cluster, member, %s' % [c.clusterLabel, c.nodeLabel],
    // Both placements, each with its machine in nodeLabel; `read(metric, selector)` reads one.
    local placed(metric, read) = |||
      %s
      or
      label_replace(%s, "%s", "$1", "member", "(.+)")
    ||| % [read(metric, c.etcdLocalSelector), read(metric, c.etcdRemoteSelector), c.nodeLabel],
    local held(metric, selector) = promql.held(metric, selector, c.gapTolerance),
    local perMember(metric, by=member, read=held) =
      'max by (%s) (\n  %s\n)\n' % [by, std.strReplace(std.rstripChars(placed(metric, read), '\n'), '\n', '\n  ')],
    local instant(metric, selector) = '%s{%s}' % [metric, selector],
    // A member's gauge from the pods reading it now, held only while none does.
    local gauge(metric, by=member) = promql.preferLive(perMember(metric, by, instant), perMember(metric, by)),
    // Growth, fragmentation, leaders and keys: only dashboards and alerts with a `for` of
    // an hour read them (slow: on slowInterval, in the -views.rules group beside).
    groups+: groups.split(c, [
      {
        name: 'kube-scale-exporter-etcd.rules',
        rules: [
          {
            record: 'etcd_cluster_member:kubescale_etcd_db_size_bytes:max',
            expr: gauge('kubescale_etcd_db_size_bytes'),
          },
          {
            record: 'etcd_cluster_member:kubescale_etcd_quota_bytes:max',
            expr: gauge('kubescale_etcd_quota_bytes'),
          },
          slow({
            record: 'etcd_cluster_member:kubescale_etcd_db_size_in_use_bytes:max',
            expr: gauge('kubescale_etcd_db_size_in_use_bytes'),
          }),
          {
            record: 'etcd_cluster_member:kubescale_etcd_quota_usage:ratio',
            expr: |||
              etcd_cluster_member:kubescale_etcd_db_size_bytes:max
              /
              etcd_cluster_member:kubescale_etcd_quota_bytes:max
            |||,
          },
          slow({
            // Share of the file that is free pages: what a defragmentation gives back.
            record: 'etcd_cluster_member:kubescale_etcd_fragmentation:ratio',
            expr: |||
              1 - etcd_cluster_member:kubescale_etcd_db_size_in_use_bytes:max
              / etcd_cluster_member:kubescale_etcd_db_size_bytes:max
            |||,
          }),
          slow({
            record: 'etcd_cluster_member:kubescale_etcd_db_size_bytes:deriv1h',
            expr: 'deriv(etcd_cluster_member:kubescale_etcd_db_size_bytes:max[1h])',
          }),
          slow({
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
          }),
          {
            record: 'etcd_cluster_member_alarm:kubescale_etcd_alarm_active:max',
            expr: gauge('kubescale_etcd_alarm_active', member + ', alarm'),
          },
          slow({
            record: 'etcd_cluster:kubescale_etcd_leaders:sum',
            expr: 'sum by (%s, etcd_cluster) (\n  %s\n)\n' % [c.clusterLabel, std.strReplace(std.rstripChars(gauge('kubescale_etcd_is_leader'), '\n'), '\n', '\n  ')],
          }),
          slow({
            // Only the pod beside the leader counts keys, every --etcd.keys-interval: after a
            // leader change the counts move to another pod within that interval, which
            // gapTolerance (as long) bridges with the last counts. Once a pod serves counts of
            // the etcd cluster, they alone count: a resource they no longer name (the smaller
            // ones are summed in "other") is gone, not held.
            local keys(read) = 'max by (%s, etcd_cluster, resource) (\n  %s\n  or\n  %s\n)\n' % [
              c.clusterLabel,
              read('kubescale_etcd_keys', c.etcdLocalSelector),
              read('kubescale_etcd_keys', c.etcdRemoteSelector),
            ],
            record: 'etcd_cluster_resource:kubescale_etcd_keys:max',
            expr: promql.preferLive(
              keys(instant),
              keys(held),
              'on (%s, etcd_cluster) (%s or %s)' % [c.clusterLabel, instant('kubescale_etcd_keys', c.etcdLocalSelector), instant('kubescale_etcd_keys', c.etcdRemoteSelector)],
            ),
          }),
          slow({
            // Key share, not byte share: counting keys needs no values read, and
            // events are small and numerous, so their key share is the telling one.
            record: 'etcd_cluster:kubescale_etcd_events_keys:ratio',
            expr: |||
              sum by (%(clusterLabel)s, etcd_cluster) (etcd_cluster_resource:kubescale_etcd_keys:max{resource="events"})
              /
              sum by (%(clusterLabel)s, etcd_cluster) (etcd_cluster_resource:kubescale_etcd_keys:max)
            ||| % c,
          }),
        ],
      },
      {
        // Performance per member, from each member's own /metrics. The counters are etcd's,
        // whichever pod read them, so they are collapsed first, each pod's last reading held
        // over gapTolerance, and the rate is taken of that one counter: a pod replaced by one
        // with a new instance label, or two pods reading one member during a rollout, leave a
        // counter that keeps counting (where rates per pod see two parts of the window, and
        // their max half the rate), and a hole while no pod reads the member leaves a reading
        // before it in the window. While the hole lasts the held counter stands still, which
        // is no drop in etcd's work: the rates are left out until a pod reads the member again,
        // and the alerts hold their last value over the hole. A member's own restart resets
        // its counter, which rate() treats as a reset.
        local counter(record, metric, by) = { record: record, expr: perMember(metric, by) },
        local rate(record, metric, by) = 'rate(%s[%s])\nand on (%s)\n%s' % [record, c.rateInterval, by, perMember(metric, by, instant)],
        local le = member + ', le',
        local fsync = 'kubescale_etcd_wal_fsync_duration_seconds_bucket',
        local commit = 'kubescale_etcd_backend_commit_duration_seconds_bucket',
        local sent = 'kubescale_etcd_client_sent_bytes_total',
        local ranges = 'kubescale_etcd_range_requests_total',
        local refused = 'kubescale_etcd_writes_refused_total',
        local quantile(record, metric) = 'histogram_quantile(0.99,\n  %s\n)\n' % std.strReplace(std.rstripChars(rate(record, metric, le), '\n'), '\n', '\n  '),
        name: 'kube-scale-exporter-etcd-performance.rules',
        rules: [
          counter('etcd_cluster_member_le:%s:max' % fsync, fsync, le),
          counter('etcd_cluster_member_le:%s:max' % commit, commit, le),
          counter('etcd_cluster_member:%s:max' % sent, sent, member),
          counter('etcd_cluster_member:%s:max' % ranges, ranges, member),
          counter('etcd_cluster_member:%s:max' % refused, refused, member),
          {
            record: 'etcd_cluster_member:kubescale_etcd_wal_fsync_duration_seconds:p99_rate%(rateInterval)s' % c,
            expr: quantile('etcd_cluster_member_le:%s:max' % fsync, fsync),
          },
          {
            record: 'etcd_cluster_member:kubescale_etcd_backend_commit_duration_seconds:p99_rate%(rateInterval)s' % c,
            expr: quantile('etcd_cluster_member_le:%s:max' % commit, commit),
          },
          // Read by dashboards and by KubeScaleEtcdReadBandwidthHigh (a `for` of 15 minutes).
          slow({
            // What the member sends its clients per second: the kube-apiservers' reads.
            record: 'etcd_cluster_member:kubescale_etcd_client_sent_bytes:rate%(rateInterval)s' % c,
            expr: rate('etcd_cluster_member:%s:max' % sent, sent, member),
          }),
          slow({
            record: 'etcd_cluster_member:kubescale_etcd_range_requests:rate%(rateInterval)s' % c,
            expr: rate('etcd_cluster_member:%s:max' % ranges, ranges, member),
          }),
          {
            // Writes refused for space (NOSPACE) or overload: what a pod without etcd's key
            // sees of a raised alarm.
            record: 'etcd_cluster_member:kubescale_etcd_writes_refused:rate%(rateInterval)s' % c,
            expr: rate('etcd_cluster_member:%s:max' % refused, refused, member),
          },
        ],
      },
    ]),
  },
}
