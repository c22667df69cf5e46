// Every knob of the mixin. Override with:
//   (import 'kube-scale-exporter-mixin/mixin.libsonnet') + { _config+:: { clusterLabel: 'k8s_cluster' } }
{
  _config+:: {
    // Selectors for our two deployments. Node mode is the DaemonSet (neighbor tables, image
    // pulls); cluster mode is the single-replica Deployment (balloons, usually etcd).
    nodeExporterSelector: 'job="kube-scale-exporter-node"',
    clusterExporterSelector: 'job="kube-scale-exporter-cluster"',
    // etcd can be watched from either placement (DaemonSet pod on etcd nodes or the
    // cluster-mode Deployment), so it gets its own selector.
    etcdSelector: 'job=~"kube-scale-exporter-(node|cluster)"',
    // The Prometheus servers to protect (their own /metrics) and their containers in
    // cAdvisor's metrics, for the self-protection group.
    prometheusSelector: 'job="prometheus"',
    prometheusContainerSelector: 'container="prometheus"',

    // The label that tells clusters apart once several send to one Prometheus/Thanos/Mimir.
    // Every aggregation keeps it, so rules work unchanged whether it exists or not.
    clusterLabel: 'cluster',
    // Show the cluster picker on dashboards (only useful with several clusters per datasource).
    showMultiCluster: false,
    // Node-mode series carry no node label from the exporter (cardinality); the scrape config
    // adds one by relabelling from pod metadata (__meta_kubernetes_pod_node_name). Its name:
    nodeLabel: 'node',

    // Window for rate()/increase() in recording rules and alerts. Must cover at least four
    // scrape intervals so one missed scrape does not break the rate.
    rateInterval: '5m',

    // Neighbor tables: share of gc_thresh3 in use (GC-eligible entries when that collector
    // runs, all entries otherwise) above which the kernel starts dropping new neighbors.
    neighborUsageWarning: 0.8,
    neighborUsageCritical: 0.95,
    neighborUsageFor: '10m',
    // The kernel default gc_thresh3 (1024): a node still on it with this share of it in use
    // has many pods and was never tuned.
    neighborKernelDefaultThresh3: 1024,
    neighborKernelDefaultUsage: 0.5,
    neighborKernelDefaultFor: '1h',

    // Image pulls: queued pulls that mean pods wait for a pull slot, and how long is too long.
    imagePullQueuedThreshold: 3,
    imagePullBacklogFor: '10m',
    imagePullStalledFor: '2m',
    // A pull older than this (queued or in progress) is far beyond a normal image's pull.
    imagePullOldestSeconds: 1200,
    imagePullOldestFor: '5m',
    imagePullSerializedFor: '15m',
    imagePreloadMissingFor: '1h',

    // etcd: share of the backend quota in use. At 100% etcd raises NOSPACE and refuses writes.
    etcdQuotaWarning: 0.8,
    etcdQuotaCritical: 0.9,
    etcdQuotaFor: '10m',
    // Linear prediction: fire when the trend over etcdPredictWindow reaches the quota within
    // etcdPredictHours. The window is long enough to ride out compaction saw-teeth.
    etcdPredictWindow: '6h',
    etcdPredictHours: 4,
    etcdPredictFor: '30m',
    etcdAlarmFor: '1m',
    // Fragmentation (1 - in_use/size) worth a defrag, ignored below a size where it is harmless.
    etcdFragmentationRatio: 0.5,
    etcdFragmentationMinBytes: 100 * 1024 * 1024,
    etcdFragmentationFor: '1h',
    // Events in the main etcd: the etcd_cluster name that is meant to hold events (via
    // --etcd-servers-overrides) and the share of keys above which they should move there.
    etcdEventsClusterName: 'events',
    etcdEventsShare: 0.3,
    etcdEventsFor: '1h',

    // Balloons: Pending this long means cluster-autoscaler is not adding nodes.
    balloonPendingSeconds: 900,
    balloonPendingFor: '5m',
    balloonExhaustedFor: '5m',
    balloonMisconfiguredFor: '15m',

    // Exporter health: a share of a job's targets down (never one alert per node; for the
    // single-replica cluster-mode job any share above this means it is down).
    exporterDownRatio: 0.1,
    exporterDownFor: '15m',
    collectorFailingFor: '15m',
    // Watches reconnect with backoff on their own; only a lasting outage needs a person.
    kubeWatchDownFor: '15m',
    // Series budgets per target (issue 7's budgets: node <= 40 with default collectors,
    // cluster <= 500); above them the fleet multiplies the overrun by the node count.
    nodeSeriesBudget: 40,
    // Node pods on etcd nodes (--etcd.local) add ~10 series per member plus, beside the
    // leader, one per Kubernetes resource (--etcd.keys-max-resources, default 100).
    etcdNodeSeriesBudget: 160,
    clusterSeriesBudget: 500,
    seriesBudgetFor: '30m',

    // Prometheus self-protection: the head series it is sized for, the share of it and of its
    // memory limit that leaves room for a compaction and a burst of queries.
    prometheusHeadSeriesBudget: 2000000,
    prometheusHeadSeriesWarning: 0.8,
    prometheusHeadSeriesPredictHours: 6,
    prometheusHeadSeriesFor: '15m',
    prometheusMemoryWarning: 0.8,
    prometheusMemoryFor: '15m',
    // A replay longer than this makes every restart an outage of that length.
    prometheusReplaySeconds: 300,
    prometheusQueryLimitFor: '5m',

    // Severities. Set criticalSeverity to 'warning' to keep this mixin from paging anyone.
    criticalSeverity: 'critical',
    warningSeverity: 'warning',
    infoSeverity: 'info',

    // Where alerts point: %s is the lower-cased alert name, an anchor in docs/runbooks.md.
    runbookURLPattern: 'https://github.com/kube-scale-exporter/kube-scale-exporter/blob/main/docs/runbooks.md#%s',

    // Dashboards. uids are fixed so links and bookmarks survive regeneration.
    grafanaDashboardIDs: {
      'kubescale-overview.json': 'kubescale-overview',
      'kubescale-node.json': 'kubescale-node',
      'kubescale-etcd.json': 'kubescale-etcd',
      'kubescale-balloons.json': 'kubescale-balloons',
    },
    dashboardTitlePrefix: 'Kube Scale / ',
    dashboardTags: ['kube-scale-exporter'],
    // A minute is plenty for capacity signals and keeps 7,500-node fleets cheap to watch.
    dashboardRefresh: '1m',
    dashboardTimeFrom: 'now-6h',
    dashboardTimezone: 'utc',
    // Default of the datasource picker (a datasource name or uid).
    datasourceName: 'prometheus',
    // Rows in "worst nodes" tables: bounded so a panel never returns thousands of series.
    topK: 10,
  },
}
