// CapacityBuffer headroom per cluster, and one headroom view for both methods (balloons and
// buffers). Read as the balloon records are: the pods serving the series now, held over
// gapTolerance only while none does (promql.preferLive), so a restart does not reset an
// alert's `for` and a replaced pod's values give way at once.
local groups = import '../lib/groups.libsonnet';
local promql = import '../lib/promql.libsonnet';
local slow = groups.slow;
{
  prometheusRules+:: {
    groups+: groups.split($._config, [
      {
        local c = $._config,
        // kubescale_capacitybuffer_buffers is served whenever the collector watches buffers.
        local answers = 'on (%s) kubescale_capacitybuffer_buffers{%s}' % [c.clusterLabel, c.clusterExporterSelector],
        local read(by, metric) = promql.preferLive(
          'max by (%s) (%s{%s})' % [by, metric, c.clusterExporterSelector],
          'max by (%s) (%s)' % [by, promql.held(metric, c.clusterExporterSelector, c.gapTolerance)],
          answers,
        ),
        local buffer = '%s, namespace, name' % c.clusterLabel,
        name: 'kube-scale-exporter-capacitybuffer.rules',
        rules: [
          {
            record: 'cluster_resource_unit:kubescale_capacitybuffer_cluster_reserved:max',
            expr: read('%s, resource, unit' % c.clusterLabel, 'kubescale_capacitybuffer_cluster_reserved'),
          },
          {
            record: 'cluster_resource_unit:kubescale_capacitybuffer_cluster_placeable:max',
            expr: read('%s, resource, unit' % c.clusterLabel, 'kubescale_capacitybuffer_cluster_placeable'),
          },
          {
            record: 'cluster_reason:kubescale_capacitybuffer_problems:max',
            expr: read('%s, reason' % c.clusterLabel, 'kubescale_capacitybuffer_problems'),
          },
          {
            // Buffers counted but left out of the sums above (past the cache cap, ...).
            record: 'cluster_reason:kubescale_capacitybuffer_buffers_untracked:max',
            expr: read('%s, reason' % c.clusterLabel, 'kubescale_capacitybuffer_buffers_untracked'),
          },
          {
            // 1 per buffer the autoscaler cannot provision now, with why: not ready,
            // limited by quotas, or a current NotTriggerScaleUp.
            record: 'cluster_namespace_name_why:kubescale_capacitybuffer_not_provisioned:max',
            expr: |||
              label_replace(max by (%(b)s) (kubescale_capacitybuffer_condition{%(s)s, condition="ReadyForProvisioning", status!="True"}), "why", "not_ready", "", "")
              or
              label_replace(max by (%(b)s) (kubescale_capacitybuffer_condition{%(s)s, condition="LimitedByQuotas", status="True"}), "why", "limited_by_quotas", "", "")
              or
              label_replace(0 * max by (%(b)s) (kubescale_capacitybuffer_scale_up_event_age_seconds{%(s)s, reason="NotTriggerScaleUp"} < %(fresh)d) + 1, "why", "scale_up_not_triggered", "", "")
            ||| % { b: buffer, s: c.clusterExporterSelector, fresh: c.capacityBufferEventCurrentSeconds },
          },
          {
            // Replicas the autoscaler resolved below those asked for (spec), per buffer.
            record: 'cluster_namespace_name:kubescale_capacitybuffer_replicas_missing:max',
            expr: |||
              max by (%(b)s) (kubescale_capacitybuffer_replicas{%(s)s, source="spec"})
              - on (%(b)s)
              max by (%(b)s) (kubescale_capacitybuffer_replicas{%(s)s, source="status"})
              > 0
            ||| % { b: buffer, s: c.clusterExporterSelector },
          },
          // What only the headroom dashboard's CapacityBuffer rows read (slow): the counts,
          // each buffer's conditions, the autoscaler's last word and each buffer's problems.
          // Per-buffer series exist for --capacitybuffer.max-buffers (20) buffers at most.
          slow({
            record: 'cluster:kubescale_capacitybuffer_buffers:max',
            expr: read(c.clusterLabel, 'kubescale_capacitybuffer_buffers'),
          }),
          slow({
            record: 'cluster:kubescale_capacitybuffer_buffers_over_cap:max',
            expr: read(c.clusterLabel, 'kubescale_capacitybuffer_buffers_over_cap'),
          }),
          slow({
            record: 'cluster_namespace_name_condition_status_reason:kubescale_capacitybuffer_condition:max',
            expr: read('%s, condition, status, reason' % buffer, 'kubescale_capacitybuffer_condition'),
          }),
          slow({
            record: 'cluster_namespace_name_reason:kubescale_capacitybuffer_scale_up_event_age_seconds:max',
            expr: read('%s, reason' % buffer, 'kubescale_capacitybuffer_scale_up_event_age_seconds'),
          }),
          slow({
            record: 'cluster_namespace_name_reason:kubescale_capacitybuffer_problem:max',
            expr: read('%s, reason' % buffer, 'kubescale_capacitybuffer_problem'),
          }),
          // One headroom view: reserved capacity by method and resource, and the part of
          // it placeable on the nodes that exist now. Balloons that run are on a node, so
          // their reserved capacity is all placeable; a buffer's replica is placeable when
          // it fits the allocatable resources of an existing node (the collector's check
          // against the same node shapes the balloon collector reads).
          slow({
            record: 'cluster_method_resource_unit:kubescale_headroom_reserved:sum',
            expr: |||
              label_replace(cluster_resource_unit:kubescale_balloon_reserved:max, "method", "balloon", "", "")
              or
              label_replace(cluster_resource_unit:kubescale_capacitybuffer_cluster_reserved:max, "method", "capacitybuffer", "", "")
            |||,
          }),
          slow({
            record: 'cluster_method_resource_unit:kubescale_headroom_placeable:sum',
            expr: |||
              label_replace(cluster_resource_unit:kubescale_balloon_reserved:max, "method", "balloon", "", "")
              or
              label_replace(cluster_resource_unit:kubescale_capacitybuffer_cluster_placeable:max, "method", "capacitybuffer", "", "")
            |||,
          }),
        ],
      },
    ]),
  },
}
