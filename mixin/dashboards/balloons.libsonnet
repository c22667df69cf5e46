// Warm headroom, however it is held: balloon (overprovisioning) pods and cluster-autoscaler
// CapacityBuffers. How much capacity each holds and how much of it fits a node that exists,
// whether the autoscaler replaces balloons after preemptions, and whether it provisions each
// buffer. Reads recording rules only; the per-buffer tables have a row per buffer (or per
// condition) of the at most --capacitybuffer.max-buffers buffers with series of their own.
local g = import '../lib/grafana.libsonnet';
local common = import 'common.libsonnet';

{
  grafanaDashboards+:: {
    'kubescale-balloons.json':
      local c = $._config;
      local s = common.selector([common.clusterMatcher(c)]);
      local sWith(m) = common.selector([common.clusterMatcher(c), m]);
      local buffer = '%s, namespace, name' % c.clusterLabel;
      // Reserved and placeable capacity of one resource, per method (balloon, capacitybuffer).
      local headroom(resource) = [
        g.target('cluster_method_resource_unit:kubescale_headroom_reserved:sum' + sWith('resource="%s"' % resource), 'reserved, {{method}}'),
        g.target('cluster_method_resource_unit:kubescale_headroom_placeable:sum' + sWith('resource="%s"' % resource), 'placeable, {{method}}'),
      ];
      local conditions = 'cluster_namespace_name_condition_status_reason:kubescale_capacitybuffer_condition:max';
      common.dashboard(c, 'kubescale-balloons.json', 'Headroom: balloons and CapacityBuffers', 'Warm spare capacity held by balloon pods or cluster-autoscaler CapacityBuffers: how much, how much of it fits the nodes there are, and whether the autoscaler keeps it.', [
        g.row('Headroom, balloons and CapacityBuffers together', [
          g.timeseries('CPU headroom', headroom('cpu'), 'short', width=8, description=|||
            CPU cores held warm, per method: "reserved" is what Running balloons request plus what CapacityBuffers' resolved replicas request; "placeable" is the part whose pod fits a node that exists now (all of a Running balloon's, a buffer's replica only if one node's allocatable takes it). Normal: flat at the size you chose, placeable equal to reserved.
            Placeable below reserved: a buffer's pod is larger than every node (runbook KubeScaleHeadroomFitsNoNode). Reserved falling: see the balloon and buffer rows below.
          |||),
          g.timeseries('Memory headroom', headroom('memory'), 'bytes', width=8, description=|||
            Memory held warm, per method, reserved and placeable as in "CPU headroom". Normal: flat, placeable equal to reserved.
            Placeable below reserved: a pod larger than every node's allocatable memory (runbook KubeScaleHeadroomFitsNoNode); lower its requests or add a larger node group.
          |||),
          g.timeseries('GPU headroom', headroom('nvidia_com_gpu'), 'short', width=8, description=|||
            nvidia.com/gpu held warm, per method, reserved and placeable as in "CPU headroom". Normal: empty without GPU headroom; else flat, placeable equal to reserved.
            Placeable below reserved: no GPU node takes one replica (too many GPUs asked, or the GPU group is at zero: the check then errs on the side of warning; runbook KubeScaleHeadroomFitsNoNode).
          |||),
        ]),
        g.row('Balloons', [
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
        g.row('CapacityBuffers', [
          g.stat('Buffers', [g.target('cluster:kubescale_capacitybuffer_buffers:max' + s)], 'short', width=4, description=|||
            CapacityBuffers in the cluster (cluster-autoscaler 1.35 and later keeps their replicas as virtual pods). Normal: the buffers you created.
            Empty: the capacitybuffer collector is off, or the API server serves no CapacityBuffer API (kubescale_capacitybuffer_api_served).
          |||),
          g.stat('Not provisioned', [g.target('count(max by (%s) (cluster_namespace_name_why:kubescale_capacitybuffer_not_provisioned:max%s)) or vector(0)' % [buffer, s])], 'short', thresholds=[[1, 'orange']], width=5, description=|||
            Buffers the autoscaler cannot provision now: not ReadyForProvisioning, LimitedByQuotas, or a NotTriggerScaleUp in the last %s. Normal: 0, or one for a scale-up's time.
            Above 0 for %s: runbook KubeScaleCapacityBufferNotProvisioned; the tables below say which and why, `kube-scale-exporter check` what to change.
          ||| % [common.minutes(c.capacityBufferEventCurrentSeconds), c.capacityBufferNotProvisionedFor]),
          g.stat('Replicas short', [g.target('sum(cluster_namespace_name:kubescale_capacitybuffer_replicas_missing:max%s) or vector(0)' % s)], 'short', thresholds=[[1, 'orange']], width=5, description=|||
            Replicas the autoscaler resolved below those the buffers ask for (spec.replicas), summed over buffers. Normal: 0.
            Above 0: a ResourceQuota or the buffer's limits cut it (runbook KubeScaleCapacityBufferBelowRequested); "Replicas short of spec" names the buffers.
          |||),
          g.stat('Buffers past the cap', [g.target('cluster:kubescale_capacitybuffer_buffers_over_cap:max' + s)], 'short', thresholds=[[1, 'orange']], width=5, description=|||
            Buffers past --capacitybuffer.max-buffers: counted in the totals and the problem counts, but with no row in the per-buffer tables. Normal: 0.
            Above 0: raise --capacitybuffer.max-buffers (each buffer is at most 15 series), or read those buffers with `kube-scale-exporter check`.
          |||),
          g.stat('Left out of the sums', [g.target('sum(cluster_reason:kubescale_capacitybuffer_buffers_untracked:max%s) or vector(0)' % s)], 'short', thresholds=[[1, 'orange']], width=5, description=|||
            Buffers counted in "Buffers" but left out of the headroom and problem counts: past --capacitybuffer.max-cached-objects, their PodTemplate past it, or unreadable. Normal: 0.
            Above 0 for %s: runbook KubeScaleCapacityBufferUntracked; the headroom panels read less than the buffers hold.
          ||| % c.capacityBufferUntrackedFor),
        ], height=5),
        g.row('CapacityBuffer provisioning', [
          g.timeseries('Buffers not provisioned, by why', [g.target('count by (%s, why) (cluster_namespace_name_why:kubescale_capacitybuffer_not_provisioned:max%s)' % [c.clusterLabel, s], '{{why}}')], stack=true, width=8, description=|||
            Buffers the autoscaler cannot provision, by why: not_ready, limited_by_quotas, scale_up_not_triggered (a buffer can have more than one). Normal: empty, or a blip during a scale-up.
            Steady: runbook KubeScaleCapacityBufferNotProvisioned; the table beside it has each buffer's condition reason.
          |||),
          g.table('Buffers not provisioned', [g.instantTarget(|||
            %(cond)s%(notReady)s
            or
            (%(cond)s%(notProvisioning)s unless on (%(buffer)s) %(cond)s%(notReady)s)
            or
            %(cond)s%(limited)s
          ||| % { cond: conditions, buffer: buffer, notReady: sWith('condition="ReadyForProvisioning", status!="True"'), notProvisioning: sWith('condition="Provisioning", status="False"'), limited: sWith('condition="LimitedByQuotas", status="True"') })], [['namespace', 'Namespace'], ['name', 'Buffer'], ['condition', 'Condition'], ['status', 'Status'], ['reason', 'Reason']], width=16, description=|||
            Each buffer's condition that stops its provisioning, with the autoscaler's reason: ReadyForProvisioning not True (reason error: the template or the sizing is wrong), else Provisioning False (BufferIsEmpty, FailedToGetPodTemplate, FailedToMakeFakePods), and LimitedByQuotas True (ResourceQuotasAllocated). Normal: empty.
            `kubectl describe capacitybuffer -n NAMESPACE NAME` gives the condition's message; `kube-scale-exporter check` the change (runbook KubeScaleCapacityBufferNotProvisioned).
          |||),
        ]),
        g.row('CapacityBuffers: the autoscaler, and problems', [
          g.table("The autoscaler's last word", [g.instantTarget('cluster_namespace_name_reason:kubescale_capacitybuffer_scale_up_event_age_seconds:max' + s)], [['namespace', 'Namespace'], ['name', 'Buffer'], ['reason', 'Last word'], ['Value', 'Age']], 's', width=8, description=|||
            The last scale-up event cluster-autoscaler posted on each buffer, and how long ago: TriggeredScaleUp (it added nodes for the buffer's virtual pods) or NotTriggerScaleUp (it could not). Normal: TriggeredScaleUp, or no row (no scale-up needed within the events' hour).
            NotTriggerScaleUp younger than %s: no node group can take its pods: a group at its max, cloud quota, or none large enough (runbook KubeScaleCapacityBufferNotProvisioned).
          ||| % common.minutes(c.capacityBufferEventCurrentSeconds)),
          g.table('Replicas short of spec', [g.instantTarget('cluster_namespace_name:kubescale_capacitybuffer_replicas_missing:max' + s)], [['namespace', 'Namespace'], ['name', 'Buffer'], ['Value', 'Replicas short']], width=8, description=|||
            Buffers whose resolved replicas (status) are below spec.replicas, and by how many. Normal: empty.
            A row for %s: runbook KubeScaleCapacityBufferBelowRequested: raise the ResourceQuota or the buffer's limits, or ask for fewer replicas.
          ||| % c.capacityBufferBelowRequestedFor),
          g.table('Buffer problems', [g.instantTarget('cluster_namespace_name_reason:kubescale_capacitybuffer_problem:max' + s)], [['namespace', 'Namespace'], ['name', 'Buffer'], ['reason', 'Problem']], width=8, description=|||
            Problems in each buffer's own spec and references: no_replicas_or_limits, no_template, pod_template_missing, scalable_kind_unknown, quantity_unparsable, no_requests, requests_fit_no_node. Normal: empty.
            Fix the buffer or its PodTemplate; `kube-scale-exporter check` gives the change for each (requests_fit_no_node: runbook KubeScaleHeadroomFitsNoNode).
          |||),
        ]),
        g.row('CapacityBuffer problems, every buffer', [
          g.table('Buffers with each problem', [g.instantTarget('cluster_reason:kubescale_capacitybuffer_problems:max%s > 0' % s)], [['reason', 'Problem'], ['Value', 'Buffers']], width=24, description=|||
            Buffers with each problem, counted over every buffer (those past the cap too), the autoscaler's (not_ready, limited_by_quotas, not_provisioning, scale_up_not_triggered) beside those of the buffers' own spec. Normal: empty.
            A count above the per-buffer tables' rows: buffers past --capacitybuffer.max-buffers have it; `kube-scale-exporter check` names them.
          |||),
        ], height=6),
      ]),
  },
}
