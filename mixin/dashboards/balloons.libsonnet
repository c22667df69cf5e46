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
          g.stat('Running balloons', [g.target('sum(cluster_phase:kubescale_balloon_pods:max%s) or vector(0)' % sWith('phase="Running"'))], 'short', width=6, description=|||
            Balloons Running now: the warm headroom real pods can take without waiting for a node. Normal: the number of balloon replicas you run.
            0 (red): no headroom; new pods wait for cluster-autoscaler to add nodes. It usually recovers by itself; if it happens often, hold more headroom (runbook KubeScaleBalloonHeadroomExhausted).
          |||) {
            fieldConfig+: { defaults+: { thresholds: { mode: 'absolute', steps: [{ color: 'red', value: null }, { color: 'green', value: 1 }] } } },
          },
          g.stat('Pending balloons', [g.target('sum(cluster_phase:kubescale_balloon_pods:max%s) or vector(0)' % sWith('phase="Pending"'))], 'short', thresholds=[[1, 'orange']], width=6, description=|||
            Balloons waiting for a node. Normal: 0, or a few for about a node's boot time after real pods preempted them.
            Pending that stays: cluster-autoscaler does not add nodes for them; see "Oldest Pending" and the Misconfigurations table (runbook KubeScaleBalloonPendingTooLong).
          |||),
          g.stat('Nodes held', [g.target('cluster:kubescale_balloon_nodes:max' + s)], 'short', width=6, description=|||
            Nodes running at least one balloon: the nodes kept warm. Normal: steady at what the balloons are sized for.
            Falling while balloons are Pending: real pods took the headroom and the autoscaler has not replaced it yet.
          |||),
          g.stat('Oldest Pending', [g.target('cluster:kubescale_balloon_pending_oldest_seconds:max' + s)], 's', thresholds=[[c.balloonPendingSeconds, 'red']], width=6, description=|||
            How long the oldest Pending balloon has waited. Normal: empty, or a node's boot time.
            Red (%s): cluster-autoscaler is not bringing a node; check its status ConfigMap, the node group's maximum size and the cloud quota (runbook KubeScaleBalloonPendingTooLong).
          ||| % common.minutes(c.balloonPendingSeconds)),
        ], height=5),
        g.row('Over time', [
          g.timeseries('Balloon pods by phase', [g.target('cluster_phase:kubescale_balloon_pods:max' + s, '{{phase}}')], stack=true, width=8, description=|||
            Balloon pods by phase, stacked. Normal: all Running; Pending for a few minutes after a burst while nodes are added.
            Running at 0 with Pending above it: the headroom is gone (runbook KubeScaleBalloonHeadroomExhausted). Pending for long: runbook KubeScaleBalloonPendingTooLong.
          |||),
          g.timeseries('Preemptions', [g.target('cluster:kubescale_balloon_preemptions:rate%s%s' % [c.rateInterval, s], 'preemptions')], 'ops', width=8, description=|||
            Balloons evicted per second to make room for real pods. Normal: spikes at scale-ups: the headroom doing its job.
            Preemptions that never stop: bursts are larger than the headroom; add balloon replicas or give each larger requests.
          |||),
          g.timeseries('Oldest Pending balloon', [g.target('cluster:kubescale_balloon_pending_oldest_seconds:max' + s, 'oldest')], 's', thresholds=[[c.balloonPendingSeconds, 'red']], width=8, description=|||
            How long the oldest Pending balloon has waited, over time. Normal: empty, or short bumps of a node's boot time.
            Past the red line (%s) the autoscaler is not replacing headroom: its logs, node-group maximums and the cloud quota say why (runbook KubeScaleBalloonPendingTooLong).
          ||| % common.minutes(c.balloonPendingSeconds)),
        ]),
        g.row('Reserved capacity', [
          g.timeseries('Requests held by Running balloons', [g.target('cluster_resource_unit:kubescale_balloon_reserved:max' + s, '{{resource}} ({{unit}})')], width=16, description=|||
            What Running balloons request, per resource: the capacity real pods can take at once without waiting for a node. Normal: flat at the size you chose.
            It drops as real pods preempt balloons and recovers when the autoscaler adds nodes; low for long: see "Pending balloons".
          |||),
          g.table('Misconfigurations', [g.instantTarget('cluster_reason:kubescale_balloon_misconfigured:max%s > 0' % s)], [['reason', 'Reason'], ['Value', 'Balloons']], width=8, description=|||
            Balloons that cannot give headroom, by reason: priority below cluster-autoscaler's `--expendable-pods-priority-cutoff`, priority not negative, PriorityClass missing, requests that fit no node, or no requests. Normal: empty.
            Give balloons a PriorityClass between the cutoff and 0, and requests that fit a node (runbook KubeScaleBalloonMisconfigured).
          |||),
        ]),
      ]),
  },
}
