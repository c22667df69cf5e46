// Balloon (overprovisioning) headroom: how much warm capacity is held, and whether the
// autoscaler replaces it after preemptions. Reads recording rules only.
local g = import '../lib/grafana.libsonnet';
local common = import 'common.libsonnet';

{
  grafanaDashboards+:: {
    'kubescale-balloons.json':
      local c = $._config;
      local s = common.selector([common.clusterMatcher(c)]);
      local sWith(m) = common.selector([common.clusterMatcher(c), m]);
      common.dashboard(c, 'kubescale-balloons.json', 'Balloons and headroom', 'Placeholder pods that keep spare nodes warm, and whether cluster-autoscaler replaces them.', [
        g.row('Headroom', [
          g.stat('Running balloons', [g.target('sum(cluster_phase:kubescale_balloon_pods:max%s) or vector(0)' % sWith('phase="Running"'))], 'short', 'Zero means no warm headroom.', [], width=6) {
            fieldConfig+: { defaults+: { thresholds: { mode: 'absolute', steps: [{ color: 'red', value: null }, { color: 'green', value: 1 }] } } },
          },
          g.stat('Pending balloons', [g.target('sum(cluster_phase:kubescale_balloon_pods:max%s) or vector(0)' % sWith('phase="Pending"'))], 'short', thresholds=[[1, 'orange']], width=6),
          g.stat('Nodes held', [g.target('cluster:kubescale_balloon_nodes:max' + s)], 'short', 'Nodes with at least one balloon.', width=6),
          g.stat('Oldest Pending', [g.target('cluster:kubescale_balloon_pending_oldest_seconds:max' + s)], 's', thresholds=[[c.balloonPendingSeconds, 'red']], width=6),
        ], height=5),
        g.row('Over time', [
          g.timeseries('Balloon pods by phase', [g.target('cluster_phase:kubescale_balloon_pods:max' + s, '{{phase}}')], stack=true, width=8),
          g.timeseries('Preemptions', [g.target('cluster:kubescale_balloon_preemptions:rate%s%s' % [c.rateInterval, s], 'preemptions')], 'ops', 'Balloons evicted to make room for real pods.', width=8),
          g.timeseries('Oldest Pending balloon', [g.target('cluster:kubescale_balloon_pending_oldest_seconds:max' + s, 'oldest')], 's', thresholds=[[c.balloonPendingSeconds, 'red']], width=8),
        ]),
        g.row('Reserved capacity', [
          g.timeseries('Requests held by Running balloons', [g.target('cluster_resource_unit:kubescale_balloon_reserved:max' + s, '{{resource}} ({{unit}})')], width=16),
          g.table('Misconfigurations', [g.instantTarget('cluster_reason:kubescale_balloon_misconfigured:max%s > 0' % s)], [['reason', 'Reason'], ['Value', 'Balloons']], width=8),
        ]),
      ]),
  },
}
