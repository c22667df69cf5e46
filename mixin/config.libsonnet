// Every knob of the mixin. Vendored with jsonnet-bundler
// (`jb install github.com/kube-scale-exporter/kube-scale-exporter/mixin@main`), override with:
//   (import 'github.com/kube-scale-exporter/kube-scale-exporter/mixin/mixin.libsonnet')
//   + { _config+:: { clusterLabel: 'k8s_cluster' } }

// A selector: the job matcher, then the extra matchers if any.
local selector(job, extra) = std.join(', ', [job] + (if extra == '' then [] else [extra]));
// A job name inside a regex matcher. Job names are plain names; '.' is the one regex
// character they commonly hold, quoted as a class so the PromQL string needs no escapes.
local plain = 'abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-:/.';
local regexQuote(name) =
  assert [ch for ch in std.stringChars(name) if std.findSubstr(ch, plain) == []] == [] :
         'job name %s: only letters, digits and _-:/. are supported' % std.escapeStringJson(name);
  std.strReplace(name, '.', '[.]');

// The knobs and their defaults: every name a user may set in _config.
local knobs = {
  // The scrape jobs of our two deployments, as deploy/ names them (its ServiceMonitors and
  // deploy/prometheus/prometheus.yml). Node mode is the DaemonSet (neighbor tables, image
  // pulls); cluster mode is the single-replica Deployment (balloons, events, usually etcd).
  nodeJobName: 'kube-scale-exporter-node',
  clusterJobName: 'kube-scale-exporter-cluster',
  // Matchers every selector of ours adds to the job, e.g. 'namespace="kube-scale-exporter"'
  // where another install in the same Prometheus reuses the job names. Empty: the job alone.
  exporterMatchers: '',
  // The selectors the rules use, built from the three knobs above so that the joint ones
  // can never disagree with the single ones (override the knobs, not these).
  nodeExporterSelector: selector('job="%s"' % self.nodeJobName, self.exporterMatchers),
  clusterExporterSelector: selector('job="%s"' % self.clusterJobName, self.exporterMatchers),
  // Both deployments in one selector, for the exporter's own health rules: an `or` of the
  // two selectors above adds a set operation over every target's series at each evaluation.
  exporterSelector: selector('job=~"%s|%s"' % [regexQuote(self.nodeJobName), regexQuote(self.clusterJobName)], self.exporterMatchers),
  // etcd is watched from two placements, and each names a member's machine its own way.
  // Beside its member (--etcd.local: deploy/components/etcd-node and etcd-node-full) a
  // pod's target carries the machine's nodeLabel. The cluster-mode Deployment
  // (--etcd.cluster) reaches the members over the network: its own node is not theirs, and
  // the member's name is the machine's (kubeadm names each member after its node; for
  // another etcd, its --name). Per-member rules and alerts carry nodeLabel from either.
  etcdLocalSelector: self.nodeExporterSelector,
  etcdRemoteSelector: self.clusterExporterSelector,
  // The Prometheus self-protection group is opt-in: most stacks already alert on their
  // Prometheus (kube-prometheus' prometheus-mixin), and a wrong selector there is silent.
  prometheusSelfProtection: false,
  // The Prometheus servers to protect (their own /metrics) and their containers in
  // cAdvisor's metrics, for the self-protection group. kube-prometheus' job name.
  prometheusSelector: 'job="prometheus-k8s"',
  prometheusContainerSelector: 'container="prometheus"',

  // The label that tells clusters apart once several send to one Prometheus/Thanos/Mimir.
  // Every aggregation keeps it, so rules work unchanged whether it exists or not.
  clusterLabel: 'cluster',
  // Show the cluster picker on dashboards (only useful with several clusters per datasource).
  showMultiCluster: false,
  // Node-mode series carry no node label from the exporter (cardinality); the scrape config
  // adds one by relabelling from pod metadata (__meta_kubernetes_pod_node_name). Its name:
  nodeLabel: 'node',
  // A label that tells node pools apart on node-mode series, where the scrape adds one (from
  // a node label such as cloud.google.com/gke-nodepool, with the scrape's attach_metadata):
  // an alert about what a node image ships then judges each pool by its own majority.
  // Empty: the cluster is one pool.
  nodePoolLabel: '',

  // Window for rate()/increase() in recording rules and alerts. Must cover at least four
  // scrape intervals so one missed scrape does not break the rate.
  rateInterval: '5m',
  // How long a gauge may be missing and still count as its last value: a lost scrape (a
  // timeout writes stale markers), a collector call that failed, our exporter restarting
  // or its DaemonSet rolling. Every gauge an alert holds through a `for` is read over this
  // window, so such a gap does not reset the `for`; a target removed for good keeps its
  // last value this long, except in the records that prefer a target serving the series now
  // (a pod restarted under a new instance label: lib/promql.libsonnet, preferLive). What it
  // costs: bench/results/mixin_gaps.md.
  gapTolerance: '5m',
  // How far back a signal counts as "was reported here", for the alerts that say we have
  // gone blind: longer than any outage worth announcing, short enough to forget a target
  // that was removed on purpose.
  notObservedLookback: '24h',
  // Rows of example nodes or targets named in the text of an alert that stands for many.
  alertExamples: 3,

  // Neighbor tables: what counts against gc_thresh3. The neighbor_gc collector's
  // GC-eligible entries; set 'kubescale_neighbor_entries' (counts PERMANENT entries too)
  // where it runs with --no-collector.neighbor_gc. One series, not an `or` of both: at
  // 7,500 nodes the `or` nearly doubled the rule's cost (bench.scale, measured on Prometheus 3.5).
  neighborUsageMetric: 'kubescale_neighbor_gc_eligible_entries',
  // Share of gc_thresh3 in use above which the kernel starts dropping new neighbors.
  neighborUsageWarning: 0.8,
  neighborUsageCritical: 0.95,
  neighborUsageFor: '10m',
  // The kernel default gc_thresh3 (1024): a node still on it with this share of it in use
  // has many pods and was never tuned. One alert per cluster and family counts such nodes
  // (a node image ships the same defaults to every node).
  neighborKernelDefaultThresh3: 1024,
  neighborKernelDefaultUsage: 0.5,
  neighborKernelDefaultFor: '1h',

  // Image pulls: queued pulls that mean pods wait for a pull slot, and how long is too long.
  // Backlog alerts also need a download in progress: queued images with nothing downloading
  // are pods in back-off or waiting for another reason, not a pull-slot backlog.
  imagePullQueuedThreshold: 3,
  imagePullBacklogFor: '10m',
  imagePullStalledFor: '2m',
  // A pull older than this (queued or in progress) is far beyond a normal image's pull.
  imagePullOldestSeconds: 1200,
  imagePullOldestFor: '5m',
  imagePullSerializedFor: '15m',
  imagePreloadMissingFor: '1h',
  // Pull failures by registry (cluster mode, from kubelet events). A registry alerts when
  // this share of its pull attempts failed over the window and at least this many nodes
  // reported a failure from it in the last 10 minutes (one node's failures are that node).
  imagePullFailureWindow: '10m',
  imagePullRateLimitedShare: 0.1,
  imagePullFailingShare: 0.25,
  imagePullFailingMinNodes: 5,
  imagePullRegistryFor: '10m',
  // containerd pull settings that differ from the cluster's majority, for this long.
  containerdSettingsFor: '1h',
  // A registry mirror containerd ignores sends every pull from that registry upstream, to
  // the quota the mirror was there to spare. containerd reads host directories at each
  // pull but its config only at start: a fix rolled out by restarting containerd node by
  // node takes a while; 30 minutes is longer than a pool's rollout takes to pass a node.
  registryMirrorIgnoredFor: '30m',
  // Nodes of one pool that disagree on which registries they pull through a mirror
  // containerd uses: a node image or a P2P DaemonSet that reached some nodes only. As
  // slow as the pull settings' drift.
  registryMirrorsDifferFor: '1h',

  // etcd-mixin's etcdDatabaseQuotaLowSpace, etcdExcessiveDatabaseGrowth and
  // etcdDatabaseHighFragmentationRatio cover the same ground as our quota, prediction and
  // fragmentation alerts. Set false where etcd-mixin runs, so one problem alerts once.
  etcdQuotaAlerts: true,
  // etcd: share of the backend quota in use. At 100% etcd raises NOSPACE and refuses writes.
  // One alert per etcd cluster (members of a cluster hold the same data), naming the worst.
  etcdQuotaWarning: 0.8,
  etcdQuotaCritical: 0.9,
  etcdQuotaFor: '10m',
  // Linear prediction: fire when the trend over etcdPredictWindow reaches the quota within
  // etcdPredictHours. The window is long enough to ride out compaction saw-teeth.
  etcdPredictWindow: '6h',
  etcdPredictHours: 4,
  etcdPredictFor: '30m',
  etcdAlarmFor: '1m',
  // Writes an etcd cluster refuses (ResourceExhausted: database space exceeded or too many
  // requests), per second over rateInterval, above which the control plane is failing
  // writes. A raised NOSPACE refuses every write: node leases alone renew once per 10 s per
  // node, far above this; a lone refusal during a burst stays under it (1/300 per second).
  etcdWritesRefusedPerSecond: 0.05,
  etcdWritesRefusedFor: '3m',
  // Fragmentation (1 - in_use/size) worth a defrag, ignored below a size where it is harmless.
  etcdFragmentationRatio: 0.5,
  etcdFragmentationMinBytes: 100 * 1024 * 1024,
  etcdFragmentationFor: '1h',
  // Events in the main etcd: the etcd_cluster name that is meant to hold events (via
  // --etcd-servers-overrides) and the share of keys above which they should move there.
  etcdEventsClusterName: 'events',
  etcdEventsShare: 0.3,
  etcdEventsFor: '1h',
  // etcd performance, per member. etcd's guidance: WAL fsync p99 below 10 ms, backend commit
  // p99 below 25 ms; both are bucket bounds' neighbours in the re-exported histograms
  // (fsync inside (8, 16] ms, commit inside (16, 32] ms). `for` outlasts a burst: a
  // 3-minute spike stays in the rateInterval window for at most 8 minutes.
  etcdFsyncP99Seconds: 0.010,
  etcdCommitP99Seconds: 0.025,
  etcdDiskSlowFor: '10m',
  // Bytes a member sends to its clients (mostly the kube-apiservers), per second, above which
  // reads are worth finding: full LISTs without resourceVersion and informers relisting. 100
  // MB/s per member is most of a 1 Gb/s NIC and several cores of etcd's CPU; at 1,000 nodes
  // a misbehaving client base pushed a 3-member main etcd past 500 MB/s in all.
  etcdReadBytesPerSecond: 100e6,
  etcdReadBandwidthFor: '15m',

  // Balloons: Pending this long means cluster-autoscaler is not adding nodes.
  // Headroom counts as back only once a balloon has stayed Running for balloonExhaustedFor:
  // a balloon that runs for a minute and is preempted again is no headroom.
  balloonPendingSeconds: 900,
  balloonPendingFor: '5m',
  balloonExhaustedFor: '5m',
  balloonMisconfiguredFor: '15m',

  // CapacityBuffers: a buffer the autoscaler cannot provision (not ReadyForProvisioning,
  // LimitedByQuotas, or its last word NotTriggerScaleUp) for longer than a scale-up takes.
  // 15 minutes is cluster-autoscaler's --max-node-provision-time default: past it the
  // autoscaler itself gives up on a node, so a healthy scale-up has ended by then.
  capacityBufferNotProvisionedFor: '15m',
  // A NotTriggerScaleUp counts as current while younger than this: the autoscaler repeats
  // it every loop, and client-go's spam filter lets one through per object every 5 minutes.
  capacityBufferEventCurrentSeconds: 600,
  // Resolved replicas below spec for this long: longer than one scale-up (as above).
  capacityBufferBelowRequestedFor: '15m',
  // Buffers left out of the headroom sums (past --capacitybuffer.max-cached-objects, or
  // unreadable) stay so until someone acts: as slow as KubeScaleBalloonMisconfigured, and
  // long enough for a burst of buffers that a controller cleans up at once.
  capacityBufferUntrackedFor: '15m',
  // A balloon set or buffer whose pod fits no node shape stays that way until someone
  // changes it: as slow as KubeScaleBalloonMisconfigured.
  headroomFitsNoNodeFor: '15m',

  // Exporter health: a share of a job's targets down (never one alert per node; for the
  // single-replica cluster-mode job any share above this means it is down). Half the
  // DaemonSet's maxUnavailable (10% in deploy/): a rollout stuck at maxUnavailable sits far
  // above it, whatever the float rounding of the share.
  exporterDownRatio: 0.05,
  exporterDownFor: '15m',
  // A collector failing more than this share of its scrapes over rateInterval, on a target:
  // one success now and then must not hide a collector that fails most of the time.
  collectorFailingRatio: 0.5,
  collectorFailingFor: '15m',
  // Watches reconnect with backoff on their own; only a lasting outage needs a person.
  kubeWatchDownFor: '15m',
  // Series budgets per target, accounted for in kube_scale_exporter/budgets.py (node pods,
  // node pods on etcd nodes with --etcd.local, the cluster Deployment); above them the
  // fleet multiplies the overrun by the node count.
  nodeSeriesBudget: (import 'budgets.libsonnet').nodeSeries,
  etcdNodeSeriesBudget: (import 'budgets.libsonnet').etcdNodeSeries,
  clusterSeriesBudget: (import 'budgets.libsonnet').clusterSeries,
  seriesBudgetFor: '30m',

  // Prometheus self-protection: the head series it is sized for, the share of it and of its
  // memory limit that leaves room for a compaction and a burst of queries. The trend is
  // taken over the head's peaks (max over prometheusHeadCycle, the 2h between head
  // compactions) across prometheusHeadSeriesPredictWindow, so series churn's saw-tooth is
  // not read as growth.
  prometheusHeadSeriesBudget: 2000000,
  prometheusHeadSeriesWarning: 0.8,
  prometheusHeadSeriesPredictHours: 6,
  prometheusHeadCycle: '2h',
  prometheusHeadSeriesPredictWindow: '6h',
  prometheusHeadSeriesFor: '15m',
  prometheusMemoryWarning: 0.8,
  prometheusMemoryFor: '15m',
  // A replay longer than this makes every restart an outage of that length.
  prometheusReplaySeconds: 300,
  // Refused queries are dashboards showing errors; a few minutes of them is not a one-off.
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
  // Titles and tags group the dashboards in Grafana's list; the tags also drive their links.
  dashboardTitlePrefix: 'Kube Scale / ',
  dashboardTags: ['kube-scale-exporter'],
  // A minute is plenty for capacity signals and keeps 7,500-node fleets cheap to watch.
  dashboardRefresh: '1m',
  // Six hours shows a day shift's trend and stays within the panels' sample budgets; UTC,
  // so the times on a dashboard match the alerts' and the logs'.
  dashboardTimeFrom: 'now-6h',
  dashboardTimezone: 'utc',
  // Default of the datasource picker (a datasource name or uid).
  datasourceName: 'prometheus',
  // Rows in "worst nodes" tables: bounded so a panel never returns thousands of series.
  topK: 10,
  // Evaluation interval of the per-node alerts with a `for` under 15 minutes (or none) and
  // of the per-node records they read: the neighbor tables near full (10m) or overflowing,
  // pulls queued (10m), stalled (2m) or too old (5m). Each evaluation reads every node's
  // series (15,000 tables at 7,500 nodes): every 30 s, these groups alone would take most
  // of the rules' budget (docs/sizing.md). A `for` still spans an evaluation after the first
  // that saw the condition; an overflow (no `for`) alerts within two intervals of the
  // scrape that saw it (this step, and the age of the record it reads). '1m' halves
  // those delays and doubles these groups' cost.
  nodeAlertInterval: '2m',
  // Evaluation interval of the rule groups that only dashboards read, and of the alerts
  // whose `for` is 15 minutes or more: at 7,500 nodes every per-node read of every
  // evaluation costs Prometheus CPU (docs/sizing.md). Such an alert fires at most two
  // intervals after its `for` runs out (its own step, and the age of the record it reads).
  // Under Prometheus' 5 min lookback, so a record read between evaluations is never stale.
  // What runs on it, and why it may:
  // - every node's neighbor usage ratio: the node dashboard and the "worst nodes" tables
  //   read it; the near-full alerts read the nodeAlertInterval record of the tables above
  //   the warning;
  // - the image-pull fleet totals and "worst nodes" tables: only dashboards read them (the
  //   per-node alerts read the nodeAlertInterval node:*:nonzero records);
  // - the exporter's target and watch counts and the alerts on them: their `for`
  //   (exporterDownFor, kubeWatchDownFor) is 15 minutes, four steps of 4 minutes;
  // - the kubelet settings, back-offs and preloads, containerd's settings, collector
  //   failures and series budgets: alerts with a `for` of 15 minutes or more;
  // - etcd's growth, fragmentation, leaders, keys and read rates, and the balloons' reserved
  //   requests, nodes, preemptions and misconfigurations: dashboards, and alerts with a `for`
  //   of 15 minutes or more (QuotaPredictedFull 30m, HighFragmentation, EventsInMainEtcd 1h,
  //   ReadBandwidthHigh, NotObserved, BalloonMisconfigured, ImagePullsSerializedWithBacklog
  //   15m, ImagePreloadMissing 1h): at 7,500 nodes these read few series, but every query
  //   of every 30 s evaluation costs its own milliseconds.
  // Set '2m' where Prometheus has the CPU to spare: at 7,500 nodes that doubles these
  // groups' cost (docs/sizing.md gives both).
  // Alerts on few series with a shorter `for` (etcd's, the balloons', the registries') stay
  // on the stack's interval.
  slowInterval: '4m',
};

// Knobs that were renamed, with what replaced them.
local renamed = {
  etcdSelector: 'is now two knobs, etcdLocalSelector and etcdRemoteSelector',
};

{
  _config+:: knobs,
  // An override naming no knob (a typo, a renamed knob) would otherwise be ignored in silence
  // and leave the default in force: rendering fails, naming it. The check sits on the mixin,
  // not in _config, so that rules may extend _config with values of their own to format.
  local unknown = std.setDiff(std.set(std.objectFieldsAll(self._config)), std.set(std.objectFieldsAll(knobs))),
  assert unknown == [] :
         'unknown _config knob%s: %s; the knobs are in mixin/config.libsonnet and docs/mixin.md' % [
    if std.length(unknown) > 1 then 's' else '',
    std.join(', ', [
      if std.objectHas(renamed, name) then '%s (%s)' % [name, renamed[name]] else name
      for name in unknown
    ]),
  ],
}
