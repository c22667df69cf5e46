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
        g.timeseries('%s: %s' % [title, which], [g.target(record + side(which), byMember)], unit, description, thresholds, width=12, min=0)
        for which in ['main', 'events']
      ];
      local r = c.rateInterval;
      common.dashboard(c, 'kubescale-etcd.json', 'etcd capacity and performance', 'etcd backend size against its quota, disk latency and read load, per cluster and member.', [
        g.row('Quota', [
          g.timeseries('Database size and quota', [
            g.target('etcd_cluster_member:kubescale_etcd_db_size_bytes:max' + e, byMember + ' size'),
            g.target('etcd_cluster_member:kubescale_etcd_db_size_in_use_bytes:max' + e, byMember + ' in use'),
            g.target('etcd_cluster_member:kubescale_etcd_quota_bytes:max' + e, byMember + ' quota'),
          ], 'bytes', width=12),
          g.timeseries('Quota used', [g.target('etcd_cluster_member:kubescale_etcd_quota_usage:ratio' + e, byMember)], 'percentunit', thresholds=[[c.etcdQuotaWarning, 'orange'], [c.etcdQuotaCritical, 'red']], width=12, min=0, max=1),
          g.timeseries('Growth', [g.target('etcd_cluster_member:kubescale_etcd_db_size_bytes:deriv1h' + e, byMember)], 'Bps', 'Slope of the database size over the last hour.', width=8),
          g.timeseries('Time to quota', [g.target('etcd_cluster_member:kubescale_etcd_seconds_to_quota:deriv1h' + e, byMember)], 's', "At the last hour's growth; empty while the database does not grow.", width=8),
          g.timeseries('Fragmentation', [g.target('etcd_cluster_member:kubescale_etcd_fragmentation:ratio' + e, byMember)], 'percentunit', 'Free pages a defragmentation would give back.', [[c.etcdFragmentationRatio, 'orange']], width=8, min=0, max=1),
        ]),
        g.row('Health', [
          g.table('Active alarms', [g.instantTarget('etcd_cluster_member_alarm:kubescale_etcd_alarm_active:max%s > 0' % e)], [['etcd_cluster', 'etcd cluster'], [c.nodeLabel, 'Node'], ['member', 'Member'], ['alarm', 'Alarm']], width=8),
          g.timeseries('Writes refused', [g.target('etcd_cluster_member:kubescale_etcd_writes_refused:rate' + r + e, byMember)], 'reqps', 'Database space exceeded (NOSPACE) or too many requests. Where the alarm list is not read (pods without the key), the sign of NOSPACE.', [[c.etcdWritesRefusedPerSecond, 'red']], width=8, min=0),
          g.stat('Leaders', [g.target('etcd_cluster:kubescale_etcd_leaders:sum' + e, '{{etcd_cluster}}')], 'short', 'Exactly one per etcd cluster.', width=8),
        ], height=6),
        g.row('Disk latency', (
          pair('WAL fsync p99', 'etcd_cluster_member:kubescale_etcd_wal_fsync_duration_seconds:p99_rate' + r, 's', "Every write waits for it; etcd wants it below 10 ms. Shown up to 256 ms (the histogram's last bound).", [[c.etcdFsyncP99Seconds, 'red']])
          + pair('Backend commit p99', 'etcd_cluster_member:kubescale_etcd_backend_commit_duration_seconds:p99_rate' + r, 's', 'etcd wants it below 25 ms. Shown up to 256 ms.', [[c.etcdCommitP99Seconds, 'red']])
        )),
        g.row('Reads', (
          pair('Bytes sent to clients', 'etcd_cluster_member:kubescale_etcd_client_sent_bytes:rate' + r, 'Bps', "The kube-apiservers' reads; full LISTs and relisting informers drive it.", [[c.etcdReadBytesPerSecond, 'orange']])
          + pair('Range requests', 'etcd_cluster_member:kubescale_etcd_range_requests:rate' + r, 'reqps', 'GETs and LISTs the member answered.')
        )),
        g.row('What fills it', [
          g.barGauge('Keys per resource', [g.instantTarget('topk(%d, etcd_cluster_resource:kubescale_etcd_keys:max%s)' % [c.topK, e]) { format: 'time_series', legendFormat: '{{etcd_cluster}} {{resource}}' }], width=12),
          g.timeseries('Events share of keys', [g.target('etcd_cluster:kubescale_etcd_events_keys:ratio' + e, '{{etcd_cluster}}')], 'percentunit', 'Above %g in an etcd other than "%s": move events with --etcd-servers-overrides.' % [c.etcdEventsShare, c.etcdEventsClusterName], [[c.etcdEventsShare, 'orange']], width=12, min=0, max=1),
        ]),
      ], [etcdVariable]),
  },
}
