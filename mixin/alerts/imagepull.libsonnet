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
    ],
  },
}
