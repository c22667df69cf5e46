// Image pulls per node: pods waiting behind a huge image, or a download that stopped moving
// (which containerd cancels after its progress timeout, and the kubelet retries from zero).
{
  prometheusAlerts+:: {
    groups+: [
      {
        local c = $._config,
        // Queued images are only a pull-slot backlog while something downloads: with nothing
        // in progress they are pods in ImagePullBackOff or waiting for another reason.
        local downloading = 'kubescale_image_pulls_in_progress{%(nodeExporterSelector)s} > 0' % c,
        name: 'kube-scale-exporter-imagepull',
        rules: [
          {
            alert: 'KubeScaleImagePullBacklog',
            expr: |||
              kubescale_image_pulls_queued{%(nodeExporterSelector)s} >= %(imagePullQueuedThreshold)d
              and
              %(downloading)s
            ||| % (c { downloading: downloading }),
            'for': c.imagePullBacklogFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'Images are queued for a pull slot on a node.',
              description: '{{ $value }} images needed by waiting containers on node {{ $labels.%(nodeLabel)s }} are neither present nor downloading, while other downloads hold the pull slots.' % c,
            },
          },
          {
            alert: 'KubeScaleImagePullStalled',
            expr: 'kubescale_image_pull_stalled{%(nodeExporterSelector)s} > 0' % c,
            'for': c.imagePullStalledFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'An image download makes no progress.',
              description: 'Image downloads without progress on node {{ $labels.%(nodeLabel)s }}: {{ $value }}. containerd cancels them and the kubelet starts over.' % c,
            },
          },
          {
            alert: 'KubeScaleImagePullTakingTooLong',
            expr: 'kubescale_image_pull_oldest_seconds{%(nodeExporterSelector)s} > %(imagePullOldestSeconds)d' % c,
            'for': c.imagePullOldestFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'An image pull has been unfinished for far longer than usual.',
              description: 'The oldest unfinished image pull on node {{ $labels.%(nodeLabel)s }} started {{ $value | humanizeDuration }} ago.' % c,
            },
          },
          {
            alert: 'KubeScaleImagePullsSerializedWithBacklog',
            expr: |||
              kubescale_image_pulls_queued{%(nodeExporterSelector)s} > 0
              and
              kubescale_kubelet_serialize_image_pulls{%(nodeExporterSelector)s} == 1
              and
              %(downloading)s
            ||| % (c { downloading: downloading }),
            'for': c.imagePullSerializedFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'The kubelet pulls one image at a time and pulls are queued behind it.',
              description: 'Node {{ $labels.%(nodeLabel)s }} runs the kubelet with serializeImagePulls=true while a download holds the only pull slot and {{ $value }} images wait for it.' % c,
            },
          },
          {
            alert: 'KubeScaleImagePreloadMissing',
            expr: 'kubescale_image_preload_missing{%(nodeExporterSelector)s} > 0' % c,
            'for': c.imagePreloadMissingFor,
            labels: { severity: c.infoSeverity },
            annotations: {
              summary: 'A node lacks images it should have baked in.',
              description: 'Node {{ $labels.%(nodeLabel)s }} is missing {{ $value }} of its preloaded images.' % c,
            },
          },
        ],
      },
      {
        local c = $._config,
        local by = '%(clusterLabel)s, registry' % c,
        local rate(metric, match) = 'sum by (%s) (rate(%s{%s%s}[%s]))' % [by, metric, c.clusterExporterSelector, match, c.imagePullFailureWindow],
        local failed = rate('kubescale_image_pull_failures_total', ''),
        // A registry with no successful pull has no success series: count it as zero.
        local attempts = '(%s + (%s or %s * 0))' % [failed, rate('kubescale_image_pulls_succeeded_total', ''), failed],
        // Many nodes, not one: a single node's broken disk or proxy is not the registry.
        local manyNodes = 'max by (%s) (kubescale_image_pull_failing_nodes{%s}) >= %d' % [by, c.clusterExporterSelector, c.imagePullFailingMinNodes],
        name: 'kube-scale-exporter-imagepull-registries',
        rules: [
          {
            alert: 'KubeScaleImageRegistryRateLimited',
            expr: |||
              %s / %s > %s
              and on (%s)
              %s
            ||| % [rate('kubescale_image_pull_failures_total', ', reason="rate_limited"'), attempts, c.imagePullRateLimitedShare, by, manyNodes],
            'for': c.imagePullRegistryFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'A registry rate-limits image pulls across many nodes.',
              description: 'Registry {{ $labels.registry }} refused {{ $value | humanizePercentage }} of image pulls with a rate limit or quota over the last %(imagePullFailureWindow)s, on %(imagePullFailingMinNodes)d or more nodes.' % c,
            },
          },
          {
            alert: 'KubeScaleImageRegistryPullsFailing',
            expr: |||
              %s / %s > %s
              and on (%s)
              %s
            ||| % [rate('kubescale_image_pull_failures_total', ', reason!="rate_limited"'), attempts, c.imagePullFailingShare, by, manyNodes],
            'for': c.imagePullRegistryFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'Image pulls from a registry fail across many nodes.',
              description: '{{ $value | humanizePercentage }} of image pulls from registry {{ $labels.registry }} failed (auth, not found, timeout, TLS or other; see kubescale_image_pull_failures_total by reason) over the last %(imagePullFailureWindow)s, on %(imagePullFailingMinNodes)d or more nodes.' % c,
            },
          },
        ],
      },
      {
        local c = $._config,
        // A node whose containerd pull setting differs from what most nodes of its cluster
        // run: a node image that lost the tuning. count_values turns each node's value
        // into a label, so it can be compared with the cluster's most common value, which
        // must hold a majority (a fleet split in half has no "right" value to name).
        local drift(metric, setting) =
          local sel = '%s{%s}' % [metric, c.nodeExporterSelector];
          local perCluster = 'count_values by (%s) ("value", %s)' % [c.clusterLabel, sel];
          |||
            label_replace(
              count_values without () ("value", %s)
              unless on (%s, value)
              topk by (%s) (1, %s)
              and on (%s)
              (max by (%s) (%s) / count by (%s) (%s) > 0.5),
              "setting", "%s", "", ""
            )
          ||| % [sel, c.clusterLabel, c.clusterLabel, perCluster, c.clusterLabel, c.clusterLabel, perCluster, c.clusterLabel, sel, setting],
        name: 'kube-scale-exporter-containerd-settings',
        rules: [
          {
            alert: 'KubeScaleContainerdPullSettingsDiffer',
            expr: drift('kubescale_containerd_max_concurrent_downloads', 'max_concurrent_downloads')
                  + 'or\n'
                  + drift('kubescale_containerd_image_pull_progress_timeout_seconds', 'image_pull_progress_timeout_seconds'),
            'for': c.containerdSettingsFor,
            labels: { severity: c.infoSeverity },
            annotations: {
              summary: "A node's containerd pull setting differs from most nodes of its cluster.",
              description: 'containerd on node {{ $labels.%s }} runs {{ $labels.setting }} = {{ $labels.value }}, unlike most nodes of the cluster: its node image may have lost the tuning.' % c.nodeLabel,
            },
          },
        ],
      },
    ],
  },
}
