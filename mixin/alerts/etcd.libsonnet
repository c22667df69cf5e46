// etcd backend quota: at the quota etcd raises NOSPACE and refuses every write, and the
// Kubernetes control plane stops working until someone compacts, defragments and disarms.
// Members of one etcd cluster hold the same data and fill together: capacity alerts are one
// per etcd cluster, naming the worst member. Every member is named by its machine (nodeLabel,
// where the runbooks start) and by the member id etcd gives it.
local text = import '../lib/alerts.libsonnet';
local groups = import '../lib/groups.libsonnet';
local slow = groups.slow;
{
  prometheusAlerts+:: {
    // Alerts with a `for` of 15 minutes or more (slow): on slowInterval, in
    // kube-scale-exporter-etcd-slow.
    groups+: groups.split($._config, [
      {
        local c = $._config,
        local etcdCluster = '%(clusterLabel)s, etcd_cluster' % c,
        // One member in a text that stands for a member: its machine, then its etcd id.
        local thisMember = 'node %s of etcd cluster {{ $labels.etcd_cluster }}' % text.member(c, '$labels'),
        local members(expr, by, limit) = text.examples(expr, by, c.nodeLabel, limit, text=text.member(c)),
        local nearQuota(severity, threshold) = {
          alert: 'KubeScaleEtcdDatabaseNearQuota',
          expr: 'max by (%s) (etcd_cluster_member:kubescale_etcd_quota_usage:ratio) > %g' % [etcdCluster, threshold],
          'for': c.etcdQuotaFor,
          labels: { severity: severity },
          annotations: {
            summary: 'An etcd database is close to its backend quota.',
            description: 'etcd cluster {{ $labels.etcd_cluster }} uses {{ $value | humanizePercentage }} of its backend quota on its fullest member, on node '
                         + members('etcd_cluster_member:kubescale_etcd_quota_usage:ratio', etcdCluster, 1) + '.',
          },
        },
        // Share of the quota each member is predicted to use etcdPredictHours from now.
        local predicted = |||
          predict_linear(etcd_cluster_member:kubescale_etcd_db_size_bytes:max[%(etcdPredictWindow)s], %(etcdPredictHours)d * 3600)
          / etcd_cluster_member:kubescale_etcd_quota_bytes:max
        ||| % c,
        local quotaAlerts = [
          nearQuota(c.warningSeverity, c.etcdQuotaWarning),
          nearQuota(c.criticalSeverity, c.etcdQuotaCritical),
          slow({
            alert: 'KubeScaleEtcdDatabaseQuotaPredictedFull',
            expr: 'max by (%s) (\n  %s\n) >= 1\n' % [etcdCluster, std.strReplace(std.rstripChars(predicted, '\n'), '\n', '\n  ')],
            'for': c.etcdPredictFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'An etcd database is predicted to reach its backend quota within hours.',
              description: ('At the growth of the last %(etcdPredictWindow)s, etcd cluster {{ $labels.etcd_cluster }} reaches its backend quota within %(etcdPredictHours)d hours ({{ $value | humanizePercentage }} of it by then), first on node ' % c)
                           + members(predicted, etcdCluster, 1) + '.',
            },
          }),
          slow({
            // Per member: a defragmentation runs member by member.
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
              description: '{{ $value | humanizePercentage }} of the database file is free pages on %s.' % thisMember,
            },
          }),
        ],
        name: 'kube-scale-exporter-etcd',
        rules: (if c.etcdQuotaAlerts then quotaAlerts else []) + [
          {
            // NOSPACE is raised cluster-wide (every member refuses writes): one alert per etcd
            // cluster. Other alarms (CORRUPT) concern one member's data: one per member.
            alert: 'KubeScaleEtcdAlarmActive',
            expr: |||
              count by (%(clusterLabel)s, etcd_cluster, alarm) (etcd_cluster_member_alarm:kubescale_etcd_alarm_active:max{alarm="NOSPACE"} > 0)
              or
              etcd_cluster_member_alarm:kubescale_etcd_alarm_active:max{alarm!="NOSPACE"} > 0
            ||| % c,
            'for': c.etcdAlarmFor,
            labels: { severity: c.criticalSeverity },
            annotations: {
              summary: 'An etcd alarm is active; with NOSPACE etcd refuses writes.',
              description: '{{ if $labels.member }}The {{ $labels.alarm }} alarm is raised on %s.' % thisMember
                           + '{{ else }}etcd cluster {{ $labels.etcd_cluster }} has the {{ $labels.alarm }} alarm raised on {{ $value }} members (nodes '
                           + members('etcd_cluster_member_alarm:kubescale_etcd_alarm_active:max > 0', '%s, alarm' % etcdCluster, c.alertExamples)
                           + '): it refuses writes.{{ end }}',
            },
          },
          {
            // What a raised NOSPACE looks like where the alarm list is not read (the key-less
            // etcd-node pods): writes refused. Also "too many requests", which refuses writes
            // as surely. Silent where KubeScaleEtcdAlarmActive names NOSPACE, and for the
            // rateInterval after it cleared: the rate still holds the alarm's refusals then.
            alert: 'KubeScaleEtcdWritesRefused',
            expr: |||
              sum by (%(clusterLabel)s, etcd_cluster) (last_over_time(etcd_cluster_member:kubescale_etcd_writes_refused:rate%(rateInterval)s[%(gapTolerance)s])) > %(etcdWritesRefusedPerSecond)g
              unless on (%(clusterLabel)s, etcd_cluster)
              max_over_time(etcd_cluster_member_alarm:kubescale_etcd_alarm_active:max{alarm="NOSPACE"}[%(rateInterval)s]) > 0
            ||| % c,
            'for': c.etcdWritesRefusedFor,
            labels: { severity: c.criticalSeverity },
            annotations: {
              summary: 'An etcd cluster refuses writes: its database is full (NOSPACE) or it is overloaded.',
              description: 'etcd cluster {{ $labels.etcd_cluster }} refuses {{ $value | humanize }} writes per second (nodes '
                           + members('etcd_cluster_member:kubescale_etcd_writes_refused:rate%(rateInterval)s > 0' % c, etcdCluster, c.alertExamples)
                           + '): the control plane cannot write to it. "database space exceeded" is NOSPACE; "too many requests" is a member whose applying lags.',
            },
          },
          slow({
            alert: 'KubeScaleEtcdEventsInMainEtcd',
            expr: 'etcd_cluster:kubescale_etcd_events_keys:ratio{etcd_cluster!="%(etcdEventsClusterName)s"} > %(etcdEventsShare)g' % c,
            'for': c.etcdEventsFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'Events take a large share of an etcd that should not hold them.',
              description: 'Events are {{ $value | humanizePercentage }} of the keys in etcd cluster {{ $labels.etcd_cluster }}; move them to their own etcd with --etcd-servers-overrides.',
            },
          }),
          // Performance, per member: a slow disk or a heavy reader is one member's problem,
          // and the fix (a local SSD, events in their own etcd) is chosen per etcd cluster,
          // so the etcd_cluster label tells main from events. The rates are left out while no
          // pod reads the member (etcd-performance.rules): held over gapTolerance here.
          {
            alert: 'KubeScaleEtcdWalFsyncSlow',
            expr: 'last_over_time(etcd_cluster_member:kubescale_etcd_wal_fsync_duration_seconds:p99_rate%(rateInterval)s[%(gapTolerance)s]) > %(etcdFsyncP99Seconds)g' % c,
            'for': c.etcdDiskSlowFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: "An etcd member's WAL fsync p99 is above etcd's guidance of 10 ms.",
              description: 'On %s, the WAL fsync takes {{ $value | humanizeDuration }} (p99 over %s); every write waits for it, and slow fsyncs cost leader elections.' % [thisMember, c.rateInterval],
            },
          },
          {
            alert: 'KubeScaleEtcdBackendCommitSlow',
            expr: 'last_over_time(etcd_cluster_member:kubescale_etcd_backend_commit_duration_seconds:p99_rate%(rateInterval)s[%(gapTolerance)s]) > %(etcdCommitP99Seconds)g' % c,
            'for': c.etcdDiskSlowFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: "An etcd member's backend commit p99 is above etcd's guidance of 25 ms.",
              description: 'On %s, the backend commit to disk takes {{ $value | humanizeDuration }} (p99 over %s).' % [thisMember, c.rateInterval],
            },
          },
          slow({
            alert: 'KubeScaleEtcdReadBandwidthHigh',
            expr: 'last_over_time(etcd_cluster_member:kubescale_etcd_client_sent_bytes:rate%(rateInterval)s[%(gapTolerance)s]) > %(etcdReadBytesPerSecond)g' % c,
            'for': c.etcdReadBandwidthFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'An etcd member sends its clients more than the configured read bandwidth.',
              description: 'On %s, etcd sends {{ $value | humanize }}B/s to its clients, over %g MB/s for %s. Usually full LISTs without resourceVersion or informers relisting: find the client in apiserver_request_total by verb and resource, or in the audit log.' % [thisMember, c.etcdReadBytesPerSecond / 1e6, c.etcdReadBandwidthFor],
            },
          }),
          slow({
            // The "we cannot see it" companion: an etcd cluster reported in the last
            // notObservedLookback that no target reports as answering now (the targets that
            // watch etcd are a handful of the node job: TargetsDown would not notice them).
            alert: 'KubeScaleEtcdNotObserved',
            expr: |||
              group by (%(clusterLabel)s, etcd_cluster) (
                last_over_time(kubescale_etcd_up{%(etcdLocalSelector)s}[%(notObservedLookback)s])
                or
                last_over_time(kubescale_etcd_up{%(etcdRemoteSelector)s}[%(notObservedLookback)s])
              )
              unless on (%(clusterLabel)s, etcd_cluster)
              (kubescale_etcd_up{%(etcdLocalSelector)s} == 1 or kubescale_etcd_up{%(etcdRemoteSelector)s} == 1)
            ||| % c,
            'for': c.exporterDownFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'No kube-scale-exporter target sees an etcd cluster any more; its alerts are blind.',
              description: 'etcd cluster {{ $labels.etcd_cluster }} was reported in the last %(notObservedLookback)s but no target reaches it now (the targets are down or etcd does not answer them): its quota and alarm alerts cannot fire.' % c,
            },
          }),
        ],
      },
    ]),
  },
}
