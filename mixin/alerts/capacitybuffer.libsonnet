// CapacityBuffers keep warm headroom as virtual pods cluster-autoscaler provisions nodes
// for. A buffer the autoscaler cannot provision, or provisions below what it asks for, is
// headroom that is not there; a pod larger than every node is headroom that never will be.
local groups = import '../lib/groups.libsonnet';
{
  prometheusAlerts+:: {
    groups+: groups.split($._config, [
      {
        local c = $._config,
        name: 'kube-scale-exporter-capacitybuffer',
        rules: [
          {
            alert: 'KubeScaleCapacityBufferNotProvisioned',
            expr: 'max by (%(clusterLabel)s, namespace, name) (cluster_namespace_name_why:kubescale_capacitybuffer_not_provisioned:max) > 0' % c,
            'for': c.capacityBufferNotProvisionedFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'The cluster-autoscaler cannot provision a CapacityBuffer: its headroom is missing.',
              description: 'CapacityBuffer {{ $labels.namespace }}/{{ $labels.name }} has not been provisioned for %(capacityBufferNotProvisionedFor)s (not ready, limited by quotas, or the autoscaler posts NotTriggerScaleUp).' % c,
            },
          },
          {
            alert: 'KubeScaleCapacityBufferBelowRequested',
            expr: 'cluster_namespace_name:kubescale_capacitybuffer_replicas_missing:max > 0',
            'for': c.capacityBufferBelowRequestedFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'A CapacityBuffer holds fewer replicas than it asks for.',
              description: 'CapacityBuffer {{ $labels.namespace }}/{{ $labels.name }} is {{ $value }} replicas short of its spec.',
            },
          },
          {
            // The collector keeps working past its cache cap, so KubeScaleCollectorFailing
            // stays quiet: this says the headroom sums leave buffers out.
            alert: 'KubeScaleCapacityBufferUntracked',
            expr: 'cluster_reason:kubescale_capacitybuffer_buffers_untracked:max > 0',
            'for': c.capacityBufferUntrackedFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'CapacityBuffers are left out of the headroom sums: the reserved headroom reads less than the buffers hold.',
              description: '{{ $value }} CapacityBuffers are counted but left out of the headroom sums ({{ $labels.reason }}).',
            },
          },
          groups.slow({
            alert: 'KubeScaleHeadroomFitsNoNode',
            expr: |||
              label_replace(cluster_reason:kubescale_capacitybuffer_problems:max{reason="requests_fit_no_node"} > 0, "method", "capacitybuffer", "", "")
              or
              label_replace(cluster_reason:kubescale_balloon_misconfigured:max{reason="requests_fit_no_node"} > 0, "method", "balloon", "", "")
            |||,
            'for': c.headroomFitsNoNodeFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'Headroom whose pod fits no node: it can never be placed.',
              description: '{{ $value }} {{ $labels.method }} objects ask for a pod larger than every node shape in the cluster.',
            },
          }),
        ],
      },
    ]),
  },
}
