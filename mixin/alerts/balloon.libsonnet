// Balloons are low-priority placeholder pods keeping spare capacity warm. No Running balloon
// means no headroom; a Pending balloon that stays Pending means no new node is coming.
local groups = import '../lib/groups.libsonnet';
{
  prometheusAlerts+:: {
    // KubeScaleBalloonMisconfigured's `for` is 15 minutes (slow): on slowInterval, in
    // kube-scale-exporter-balloon-slow.
    groups+: groups.split($._config, [
      {
        local c = $._config,
        name: 'kube-scale-exporter-balloon',
        rules: [
          {
            // Headroom is back only once balloons have stayed Running for the whole window: a
            // replacement balloon that runs for a minute and is preempted again, in a burst,
            // does not clear (or restart) the alert. Pending is read now, not over the window:
            // balloons all Running again (none Pending) clear it at once, and an outage that
            // ended before the `for` ran out never fires.
            alert: 'KubeScaleBalloonHeadroomExhausted',
            expr: |||
              max by (%(clusterLabel)s) (cluster_phase:kubescale_balloon_pods:max{phase="Pending"}) > 0
              unless on (%(clusterLabel)s)
              min by (%(clusterLabel)s) (min_over_time(cluster_phase:kubescale_balloon_pods:max{phase="Running"}[%(balloonExhaustedFor)s])) > 0
            ||| % c,
            'for': c.balloonExhaustedFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'Every balloon has been preempted: no warm headroom is left.',
              description: 'No balloon has stayed Running through the last %(balloonExhaustedFor)s and {{ $value }} are Pending; new pods wait for cluster-autoscaler.' % c,
            },
          },
          {
            alert: 'KubeScaleBalloonPendingTooLong',
            expr: 'cluster:kubescale_balloon_pending_oldest_seconds:max > %(balloonPendingSeconds)d' % c,
            'for': c.balloonPendingFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'A balloon has been Pending for long: cluster-autoscaler is not adding nodes.',
              description: 'The oldest Pending balloon has waited {{ $value | humanizeDuration }}.',
            },
          },
          groups.slow({
            alert: 'KubeScaleBalloonMisconfigured',
            expr: 'cluster_reason:kubescale_balloon_misconfigured:max > 0',
            'for': c.balloonMisconfiguredFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'Balloons are configured so that they cannot provide headroom.',
              description: '{{ $value }} balloons are misconfigured: {{ $labels.reason }}.',
            },
          }),
        ],
      },
    ]),
  },
}
