// Image pulls per node: pods waiting behind a huge image, or a download that stopped moving
// (which containerd cancels after its progress timeout, and the kubelet retries from zero).
// Each gauge is held over gapTolerance: a lost scrape or the DaemonSet's pod restarting does
// not reset a `for`.
local text = import '../lib/alerts.libsonnet';
local groups = import '../lib/groups.libsonnet';
local promql = import '../lib/promql.libsonnet';
{
  prometheusAlerts+:: {
    // KubeScaleImagePullsSerializedWithBacklog and KubeScaleImagePreloadMissing hold for 15
    // minutes and an hour (slow): on slowInterval, in kube-scale-exporter-imagepull-slow.
    groups+: groups.split($._config, [
      {
        local c = $._config,
        // The node gauges held over gapTolerance, non-zero ones only (rules/imagepull.libsonnet).
        local held(metric) = 'node:%s:nonzero' % metric,
        // Queued images are only a pull-slot backlog while something downloads: with nothing
        // in progress they are pods in ImagePullBackOff or waiting for another reason.
        local downloading = held('kubescale_image_pulls_in_progress') + ' > 0',
        // Over the nodeAlertInterval records of every node's pulls: on that interval too.
        name: 'kube-scale-exporter-imagepull',
        interval: c.nodeAlertInterval,
        rules: [
          {
            alert: 'KubeScaleImagePullBacklog',
            expr: |||
              %(queued)s >= %(imagePullQueuedThreshold)d
              and
              %(downloading)s
            ||| % (c { queued: held('kubescale_image_pulls_queued'), downloading: downloading }),
            'for': c.imagePullBacklogFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'Images are queued for a pull slot on a node.',
              description: '{{ $value }} images needed by waiting containers on node {{ $labels.%(nodeLabel)s }} are neither present nor downloading, while other downloads hold the pull slots.' % c,
            },
          },
          {
            alert: 'KubeScaleImagePullStalled',
            expr: held('kubescale_image_pull_stalled') + ' > 0',
            'for': c.imagePullStalledFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'An image download makes no progress.',
              description: 'Image downloads without progress on node {{ $labels.%(nodeLabel)s }}: {{ $value }}. containerd cancels them and the kubelet starts over.' % c,
            },
          },
          {
            alert: 'KubeScaleImagePullTakingTooLong',
            expr: held('kubescale_image_pull_oldest_seconds') + ' > %(imagePullOldestSeconds)d' % c,
            'for': c.imagePullOldestFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'An image pull has been unfinished for far longer than usual.',
              description: 'The oldest unfinished image pull on node {{ $labels.%(nodeLabel)s }} started {{ $value | humanizeDuration }} ago.' % c,
            },
          },
          groups.slow({
            alert: 'KubeScaleImagePullsSerializedWithBacklog',
            expr: |||
              %(queued)s > 0
              and
              %(serialized)s == 1
              and
              %(downloading)s
            ||| % (c { queued: held('kubescale_image_pulls_queued'), serialized: held('kubescale_kubelet_serialize_image_pulls'), downloading: downloading }),
            'for': c.imagePullSerializedFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'The kubelet pulls one image at a time and pulls are queued behind it.',
              description: 'Node {{ $labels.%(nodeLabel)s }} runs the kubelet with serializeImagePulls=true while a download holds the only pull slot and {{ $value }} images wait for it.' % c,
            },
          }),
          groups.slow({
            alert: 'KubeScaleImagePreloadMissing',
            expr: held('kubescale_image_preload_missing') + ' > 0',
            'for': c.imagePreloadMissingFor,
            labels: { severity: c.infoSeverity },
            annotations: {
              summary: 'A node lacks images it should have baked in.',
              description: 'Node {{ $labels.%(nodeLabel)s }} is missing {{ $value }} of its preloaded images.' % c,
            },
          }),
        ],
      },
      {
        local c = $._config,
        local by = '%(clusterLabel)s, registry' % c,
        local rate(metric, match) = 'sum by (%s) (rate(%s{%s%s}[%s]))' % [by, metric, c.clusterExporterSelector, match, c.imagePullFailureWindow],
        local failed = rate('kubescale_image_pull_failures_total', ''),
        // A registry with no successful pull has no success series: count it as zero.
        local attempts = '(%s + (%s or %s * 0))' % [failed, rate('kubescale_image_pulls_succeeded_total', ''), failed],
        // Many nodes, not one: a single node's broken disk or proxy is not the registry. The
        // gauge counts the nodes failing in the exporter's last 10 minutes, kept in its memory:
        // a restarted exporter (OOMKilled, rescheduled) counts them again from zero, and a lost
        // scrape leaves none. Its highest value over as long a window is what the registry did.
        // The share above is a rate(), which survives a counter reset and a new instance label.
        local manyNodes = 'max by (%s) (max_over_time(kubescale_image_pull_failing_nodes{%s}[%s])) >= %d' % [by, c.clusterExporterSelector, c.imagePullFailureWindow, c.imagePullFailingMinNodes],
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
        local pool = promql.poolBy(c),
        // Nodes whose containerd pull setting differs from what most nodes of their cluster
        // (or node pool) run: a node image that lost the tuning. A node image rolls out to a
        // whole pool, so this is one alert per pool and setting, counting the nodes and naming
        // a few, never one per node. The most common value must hold a majority (a fleet split
        // in half has no "right" value to name).
        local drift(setting) =
          local counts = 'cluster_value:kubescale_containerd_%s:count' % setting;
          |||
            label_replace(
              sum by (%(pool)s) (%(counts)s) - max by (%(pool)s) (%(counts)s) > 0
              and on (%(pool)s)
              max by (%(pool)s) (%(counts)s) / sum by (%(pool)s) (%(counts)s) > 0.5,
              "setting", "%(setting)s", "", ""
            )
          ||| % { pool: pool, counts: counts, setting: setting },
        // The nodes off the most common value, each with its own value in `value`.
        local differing(setting, metric) =
          'count_values without () ("value", %s) unless on (%s, value) topk by (%s) (1, cluster_value:kubescale_containerd_%s:count)'
          % [promql.held(metric, c.nodeExporterSelector, c.gapTolerance), pool, pool, setting],
        local bySetting(f) =
          '{{ if eq $labels.setting "max_concurrent_downloads" }}%s{{ else }}%s{{ end }}'
          % [f('max_concurrent_downloads', 'kubescale_containerd_max_concurrent_downloads'), f('image_pull_progress_timeout_seconds', 'kubescale_containerd_image_pull_progress_timeout_seconds')],
        local where = 'cluster {{ $labels.%s }}' % c.clusterLabel
                      + (if c.nodePoolLabel == '' then '' else ' node pool {{ $labels.%s }}' % c.nodePoolLabel),
        // An hour-long `for` over counts recorded on slowInterval: on slowInterval too.
        name: 'kube-scale-exporter-containerd-settings',
        interval: c.slowInterval,
        rules: [
          {
            alert: 'KubeScaleContainerdPullSettingsDiffer',
            expr: drift('max_concurrent_downloads') + 'or\n' + drift('image_pull_progress_timeout_seconds'),
            'for': c.containerdSettingsFor,
            labels: { severity: c.infoSeverity },
            annotations: {
              summary: 'Nodes run containerd pull settings unlike most nodes of their pool.',
              description: ('{{ $value }} nodes of %s run containerd {{ $labels.setting }} unlike the majority, which runs ' % where)
                           + bySetting(function(setting, metric) text.examples('cluster_value:kubescale_containerd_%s:count' % setting, pool, 'value', 1))
                           + ': '
                           + bySetting(function(setting, metric) text.examples(differing(setting, metric), pool, c.nodeLabel, c.alertExamples, text='{{ .Labels.%s }} ({{ .Labels.value }})' % c.nodeLabel, first=true))
                           + '. Their node image may have lost the tuning.',
            },
          },
        ],
      },
      {
        local c = $._config,
        local pool = promql.poolBy(c),
        local where = 'cluster {{ $labels.%s }}' % c.clusterLabel
                      + (if c.nodePoolLabel == '' then '' else ' node pool {{ $labels.%s }}' % c.nodePoolLabel),
        local mirrors(verdict) = promql.held('kubescale_containerd_registry_mirror_hosts', c.nodeExporterSelector + ', verdict="%s"' % verdict, c.gapTolerance),
        // Per node and registry: the mirrors containerd ignores, with why (one reason a
        // directory; max over the roots that hold one). The text names each node once, with
        // how many registries it ignores (the series and `check` say which and why).
        local ignored = 'max by (%s, %s, registry, reason) (%s > 0)' % [pool, c.nodeLabel, mirrors('ignored')],
        local used = 'max by (%s, %s, registry) (%s > 0)' % [pool, c.nodeLabel, mirrors('used')],
        // Nodes whose containerd config the collector read: the pool's size for this.
        local reporting = 'count by (%s) (%s)' % [pool, promql.held('kubescale_containerd_image_pull_path', c.nodeExporterSelector, c.gapTolerance)],
        // The alert's examples: its cluster's nodes that pull its registry from the registry
        // itself, the few to fix. Each alert's query reads its own cluster and registry only,
        // not every node's mirrors of every cluster (text.examples' args: 1 the cluster, 2 the
        // registry).
        local ownCluster(selector) = text.literal(selector) + ", %s='%%[1]s'" % c.clusterLabel,
        local upstream = 'group by (%s, %s) (%s) unless on (%s, %s) max by (%s, %s) (%s > 0)' % [
          pool,
          c.nodeLabel,
          promql.held('kubescale_containerd_image_pull_path', ownCluster(c.nodeExporterSelector), c.gapTolerance),
          pool,
          c.nodeLabel,
          pool,
          c.nodeLabel,
          promql.held('kubescale_containerd_registry_mirror_hosts', ownCluster(c.nodeExporterSelector) + ", verdict=\"used\", registry='%[2]s'", c.gapTolerance),
        ],
        // Hour-long `for`s and a half-hour one: on slowInterval.
        name: 'kube-scale-exporter-registry-mirrors',
        interval: c.slowInterval,
        rules: [
          {
            alert: 'KubeScaleRegistryMirrorIgnored',
            expr: 'count by (%s) (max by (%s, %s) (%s))' % [pool, pool, c.nodeLabel, ignored],
            'for': c.registryMirrorIgnoredFor,
            labels: { severity: c.warningSeverity },
            annotations: {
              summary: 'Nodes have registry mirrors that containerd ignores: their pulls go to the upstream registry.',
              description: ('{{ $value }} nodes of %s have registry mirrors (hosts.toml) that containerd does not read, so every pull from those registries goes upstream: ' % where)
                           + text.examples('count by (%s, %s) (%s)' % [pool, c.nodeLabel, ignored], pool, c.nodeLabel, c.alertExamples, text='{{ .Labels.%s }} ({{ .Value }} registries)' % c.nodeLabel, first=true)
                           + '. kubescale_containerd_registry_mirror_hosts{verdict="ignored"} says which registries and why; `kube-scale-exporter check` on a node prints the config change that fixes it.',
            },
          },
          {
            alert: 'KubeScaleRegistryMirrorsDiffer',
            expr: |||
              count by (%(pool)s, registry) (%(used)s)
              < on (%(pool)s) group_left ()
              %(reporting)s
            ||| % { pool: pool, used: used, reporting: reporting },
            'for': c.registryMirrorsDifferFor,
            labels: { severity: c.infoSeverity },
            annotations: {
              summary: 'Nodes of one pool disagree on which registries they pull through a mirror.',
              description: ('Only {{ $value }} nodes of %s pull registry {{ $labels.registry }} through a mirror containerd uses; the others pull it from the registry itself (' % where)
                           + text.examples(upstream, pool, c.nodeLabel, c.alertExamples, first=true, args=['$labels.%s' % c.clusterLabel, '$labels.registry'])
                           + '): no mirror there, or one containerd ignores.',
            },
          },
        ],
      },
    ]),
  },
}
