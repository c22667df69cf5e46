// etcd capacity and performance per cluster and member: size against quota, fragmentation,
// time to quota, disk latency and reads (main beside events),
// alarms and which Kubernetes resources fill it. Reads recording rules only.
local g = import '../lib/grafana.libsonnet';
local common = import 'common.libsonnet';

{
  grafanaDashboards+:: {
    'kubescale-etcd.json':
      local c = $._config;
      local e = common.selector([common.clusterMatcher(c), 'etcd_cluster=~"$etcd_cluster"']);
      local etcdVariable = g.queryVariable(
        'etcd_cluster',
        'etcd cluster',
        'label_values(etcd_cluster_member:kubescale_etcd_quota_usage:ratio%s, etcd_cluster)' % common.selector([common.clusterMatcher(c)]),
        multi=true
      );
      // A member by its machine first (where the runbooks start), then its etcd id.
      local byMember = '{{etcd_cluster}} {{%s}} ({{member}})' % c.nodeLabel;
      // Performance panels come in pairs, main beside events: the etcd that suffers first is
      // the one to give a local SSD or to relieve of events. "main" is every etcd cluster but
      // the events one (etcdEventsClusterName).
      local ev = c.etcdEventsClusterName;
      local side(which) = common.selector([
        common.clusterMatcher(c),
        'etcd_cluster=~"$etcd_cluster"',
        if which == 'main' then 'etcd_cluster!="%s"' % ev else 'etcd_cluster="%s"' % ev,
      ]);
      local pair(title, record, unit, description, thresholds=[]) = [
        g.timeseries('%s: %s' % [title, which], [g.target(record + side(which), byMember)], unit, description % { which: which }, thresholds, width=12, min=0)
        for which in ['main', 'events']
      ];
      local r = c.rateInterval;
      local pct = common.percent;
      local ms = common.milliseconds;
      common.dashboard(c, 'kubescale-etcd.json', 'etcd capacity and performance', 'etcd backend size against its quota, disk latency and read load, per cluster and member.', [
        g.row('Quota', [
          g.timeseries('Database size and quota', [
            g.target('etcd_cluster_member:kubescale_etcd_db_size_bytes:max' + e, byMember + ' size'),
            g.target('etcd_cluster_member:kubescale_etcd_db_size_in_use_bytes:max' + e, byMember + ' in use'),
            g.target('etcd_cluster_member:kubescale_etcd_quota_bytes:max' + e, byMember + ' quota'),
          ], 'bytes', width=12, description=|||
            Each member's database file, the part of it in use (the rest is free pages a defragmentation gives back) and its backend quota. Normal: size well below the quota, in use close to size.
            Size near the quota: if in use is much smaller, compact and defragment; otherwise find what fills it ("Keys per resource") or raise the quota (runbook KubeScaleEtcdDatabaseNearQuota).
          |||),
          g.timeseries('Quota used', [g.target('etcd_cluster_member:kubescale_etcd_quota_usage:ratio' + e, byMember)], 'percentunit', thresholds=[[c.etcdQuotaWarning, 'orange'], [c.etcdQuotaCritical, 'red']], width=12, min=0, max=1, description=|||
            Each member's database file as a share of its quota (`--quota-backend-bytes`). Normal: steady, below %s (orange).
            At 100%% etcd raises NOSPACE and refuses every write: the Kubernetes API stops accepting changes. Above orange: free pages (defragment) or data (find its source below) take the space (runbook KubeScaleEtcdDatabaseNearQuota).
          ||| % pct(c.etcdQuotaWarning)),
          g.timeseries('Growth', [g.target('etcd_cluster_member:kubescale_etcd_db_size_bytes:deriv1h' + e, byMember)], 'Bps', width=8, description=|||
            Slope of each member's database size over the last hour. Normal: near 0; up after a rollout or a burst of events, down after a compaction and defragmentation.
            Positive for hours: something keeps adding keys; "Keys per resource" names the resource and "Time to quota" how long is left.
          |||),
          g.timeseries('Time to quota', [g.target('etcd_cluster_member:kubescale_etcd_seconds_to_quota:deriv1h' + e, byMember)], 's', width=8, description=|||
            How long until each member's database reaches its quota at the last hour's growth; empty while it does not grow. Normal: empty, or days.
            Hours: stop what grows, or compact and defragment, before the quota is hit (runbook KubeScaleEtcdDatabaseQuotaPredictedFull).
          |||),
          g.timeseries('Fragmentation', [g.target('etcd_cluster_member:kubescale_etcd_fragmentation:ratio' + e, byMember)], 'percentunit', thresholds=[[c.etcdFragmentationRatio, 'orange']], width=8, min=0, max=1, description=|||
            The share of each member's database file that is free pages a defragmentation would give back. Normal: below %s (orange); a small database may sit higher harmlessly.
            Above, on a large database: the free pages count against the quota. `etcdctl defrag` one member at a time, leader last, at a quiet hour: a member does not serve while it defragments (runbook KubeScaleEtcdHighFragmentation).
          ||| % pct(c.etcdFragmentationRatio)),
        ]),
        g.row('Health', [
          g.table('Active alarms', [g.instantTarget('etcd_cluster_member_alarm:kubescale_etcd_alarm_active:max%s > 0' % e)], [['etcd_cluster', 'etcd cluster'], [c.nodeLabel, 'Node'], ['member', 'Member'], ['alarm', 'Alarm']], width=8, description=|||
            etcd alarms raised now, with the member and its node. Normal: empty.
            NOSPACE: the cluster accepts only reads and deletes; free space (compact, defragment one member at a time), then `etcdctl alarm disarm`. CORRUPT: do not disarm; remove the member, wipe its data and add it back (runbook KubeScaleEtcdAlarmActive).
          |||),
          g.timeseries('Writes refused', [g.target('etcd_cluster_member:kubescale_etcd_writes_refused:rate' + r + e, byMember)], 'reqps', thresholds=[[c.etcdWritesRefusedPerSecond, 'red']], width=8, min=0, description=|||
            Writes each member refused per second: database space exceeded (NOSPACE), or too many requests (it applies far behind what it commits). Where the alarm list is not read (pods without etcd's key) this is the sign of NOSPACE. Normal: 0.
            Above the red line (%g/s): the control plane's writes fail. Check "Quota used"; if there is room, the member's disk or CPU cannot keep up (runbook KubeScaleEtcdWritesRefused).
          ||| % c.etcdWritesRefusedPerSecond),
          g.stat('Leaders', [g.target('etcd_cluster:kubescale_etcd_leaders:sum' + e, '{{etcd_cluster}}')], 'short', width=8, description=|||
            Members that report themselves leader, per etcd cluster. Normal: exactly 1.
            0: no leader, so no writes: quorum is lost; check the members are up and reach each other. 2 for a moment during an election is harmless; more than 1 for long: a member is cut off from the others.
          |||),
        ], height=6),
        g.row('Disk latency', (
          pair('WAL fsync p99', 'etcd_cluster_member:kubescale_etcd_wal_fsync_duration_seconds:p99_rate' + r, 's', |||
            The 99th percentile of the write-ahead-log fsync of each member of the %%(which)s etcd: every write waits for it on a quorum of members. Normal: below %s (red line, etcd's own guidance). Shown up to 256 ms (the histogram's last bound).
            Above: one member, its disk; every member, the storage class. Give etcd a local SSD of its own and move events to their own etcd (runbook KubeScaleEtcdWalFsyncSlow).
          ||| % ms(c.etcdFsyncP99Seconds), [[c.etcdFsyncP99Seconds, 'red']])
          + pair('Backend commit p99', 'etcd_cluster_member:kubescale_etcd_backend_commit_duration_seconds:p99_rate' + r, 's', |||
            The 99th percentile of the backend (bbolt) commit of each member of the %%(which)s etcd. Normal: below %s (red line). Shown up to 256 ms.
            Above: slow commits hold the lock readers need. With "WAL fsync p99" high too: the disk (runbook KubeScaleEtcdWalFsyncSlow); alone: a large database; compact, defragment and find what fills it (runbook KubeScaleEtcdBackendCommitSlow).
          ||| % ms(c.etcdCommitP99Seconds), [[c.etcdCommitP99Seconds, 'red']])
        )),
        g.row('Reads', (
          pair('Bytes sent to clients', 'etcd_cluster_member:kubescale_etcd_client_sent_bytes:rate' + r, 'Bps', |||
            What each member of the %%(which)s etcd sends its clients, the kube-apiservers, per second. Normal: steady, below %g MB/s (orange).
            Above: full LISTs served from etcd rather than the API server's watch cache, or informers relisting in a loop; find the client in the API servers' metrics and audit log (runbook KubeScaleEtcdReadBandwidthHigh).
          ||| % (c.etcdReadBytesPerSecond / 1e6), [[c.etcdReadBytesPerSecond, 'orange']])
          + pair('Range requests', 'etcd_cluster_member:kubescale_etcd_range_requests:rate' + r, 'reqps', |||
            GETs and LISTs each member of the %(which)s etcd answered per second. Normal: steady, following the cluster's activity.
            A jump with "Bytes sent to clients": a client listing in a loop (runbook KubeScaleEtcdReadBandwidthHigh); a jump alone: many small reads, usually harmless.
          |||)
        )),
        g.row('What fills it', [
          g.barGauge('Keys per resource', [g.instantTarget('topk(%d, etcd_cluster_resource:kubescale_etcd_keys:max%s)' % [c.topK, e]) { format: 'time_series', legendFormat: '{{etcd_cluster}} {{resource}}' }], width=12, description=|||
            The %d Kubernetes resources with the most keys, per etcd cluster. Normal: pods, leases and events in proportion to the cluster's size.
            One resource far above its peers (events, or objects a controller creates in a loop) is what fills the quota: stop its source, or move events to their own etcd.
          ||| % c.topK),
          g.timeseries('Events share of keys', [g.target('etcd_cluster:kubescale_etcd_events_keys:ratio' + e, '{{etcd_cluster}}')], 'percentunit', thresholds=[[c.etcdEventsShare, 'orange']], width=12, min=0, max=1, description=|||
            The share of each etcd cluster's keys that are events. Normal: below %s (orange) in every etcd but "%s", which holds only events.
            Above it in another etcd: events crowd its quota and compaction; give events their own etcd with `--etcd-servers-overrides` on every API server (runbook KubeScaleEtcdEventsInMainEtcd).
          ||| % [pct(c.etcdEventsShare), c.etcdEventsClusterName]),
        ]),
      ], [etcdVariable]),
  },
}
