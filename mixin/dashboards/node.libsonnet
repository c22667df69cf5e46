// One node in detail. Raw per-node series are fine here: every query is pinned to $node.
local g = import '../lib/grafana.libsonnet';
local common = import 'common.libsonnet';

{
  grafanaDashboards+:: {
    'kubescale-node.json':
      local c = $._config;
      local n = common.selector([common.clusterMatcher(c), c.nodeExporterSelector, '%s="$node"' % c.nodeLabel]);
      local nodeVariable = g.queryVariable(
        'node',
        'Node',
        'label_values(kubescale_build_info%s, %s)' % [common.selector([common.clusterMatcher(c), c.nodeExporterSelector]), c.nodeLabel]
      );
      local pct = common.percent;
      common.dashboard(c, 'kubescale-node.json', 'Node', 'Neighbor tables, image pulls and the exporter on one node.', [
        g.row('Neighbor tables', [
          g.timeseries('Entries and thresholds', [
            g.target('kubescale_neighbor_entries' + n, '{{family}} entries'),
            g.target('kubescale_neighbor_gc_eligible_entries' + n, '{{family}} GC-eligible'),
            g.target('kubescale_neighbor_gc_thresh2' + n, '{{family}} gc_thresh2'),
            g.target('kubescale_neighbor_gc_thresh3' + n, '{{family}} gc_thresh3'),
          ], 'short', width=12, description=|||
            This node's neighbor entries (all, and those the kernel's GC may drop) against gc_thresh2 (above it GC gets aggressive) and gc_thresh3 (the hard limit), per address family. Normal: GC-eligible entries well below gc_thresh3.
            GC-eligible entries at gc_thresh3 make the kernel drop new neighbors: raise `gc_thresh1/2/3` on the node now (`sysctl -w`) and in its image (runbook KubeScaleNeighborTableNearFull).
          |||),
          g.timeseries('Usage of gc_thresh3', [g.target('node_family:kubescale_neighbor_usage:ratio' + n, '{{family}}')], 'percentunit', thresholds=[[c.neighborUsageWarning, 'orange'], [c.neighborUsageCritical, 'red']], width=6, min=0, max=1, description=|||
            The share of gc_thresh3 in use on this node, per family. Normal: below %s (orange).
            At red (%s) the table is about to refuse neighbors. Raise the thresholds, and if usage keeps climbing find why the node talks to so many peers directly (runbook KubeScaleNeighborTableNearFull).
          ||| % [pct(c.neighborUsageWarning), pct(c.neighborUsageCritical)]),
          g.timeseries('Overflows and forced GC', [
            g.target('rate(kubescale_neighbor_table_overflows_total%s[$__rate_interval])' % n, '{{family}} overflows'),
            g.target('rate(kubescale_neighbor_forced_gc_runs_total%s[$__rate_interval])' % n, '{{family}} forced GC runs'),
          ], 'ops', width=6, description=|||
            Per second: neighbors the kernel refused because the table was full (overflows), and garbage collections it forced because the table grew past its thresholds. Normal: no overflows; forced GC now and then.
            Any overflow means connections to new peers failed at that moment: raise the thresholds now (runbook KubeScaleNeighborTableOverflow). Constant forced GC: the table lives at its limit.
          |||),
        ]),
        g.row('Image pulls', [
          g.timeseries('Pulls', [
            g.target('kubescale_image_pulls_queued' + n, 'queued'),
            g.target('kubescale_image_pulls_in_progress' + n, 'in progress'),
            g.target('kubescale_image_pull_stalled' + n, 'stalled'),
            g.target('kubescale_image_pulls_failing' + n, 'in back-off'),
          ], width=8, description=|||
            Images this node's pods wait for (queued), downloads under way (in progress), downloads that stopped moving (stalled) and images the kubelet retries with back-off. Normal: queued drains within minutes, stalled and back-off stay 0.
            Queued behind a single download: pulls are serialized ("Serialized pulls"). Stalled: the registry or the network path. Back-off: `kubectl describe pod` names the error (tag, credentials, rate limit).
          |||),
          g.timeseries('Oldest unfinished pull', [g.target('kubescale_image_pull_oldest_seconds' + n, 'oldest')], 's', thresholds=[[c.imagePullOldestSeconds, 'red']], width=8, description=|||
            Age of the oldest pull on this node that has not finished (queued or downloading): the wait of the pods that need it. Normal: minutes.
            Past the red line (%s): "Download progress" tells a huge image moving slowly (preload it, shrink it, mirror it) from one queued behind another download (runbook KubeScaleImagePullTakingTooLong).
          ||| % common.minutes(c.imagePullOldestSeconds)),
          g.timeseries('Download progress', [
            g.target('kubescale_image_pull_downloaded_bytes' + n, 'downloaded'),
            g.target('kubescale_image_pull_expected_bytes' + n, 'expected'),
          ], 'bytes', width=8, description=|||
            Bytes downloaded so far against the bytes expected, over the downloads in progress on this node. Normal: downloaded climbs to expected, then both drop as the pull ends.
            Downloaded flat: the pull is stalled (registry, network; runbook KubeScaleImagePullStalled). A slow climb of a huge expected size: preload that image into the node image or serve it from a mirror near the nodes.
          |||),
          g.stat('Serialized pulls', [g.target('kubescale_kubelet_serialize_image_pulls' + n)], 'bool_yes_no', thresholds=[[1, 'orange']], width=8, description=|||
            Whether this node's kubelet pulls one image at a time (`serializeImagePulls: true`, the kubelet's default). Normal: no, on a fleet tuned for parallel pulls.
            Yes while images queue: every pod waits for the one download; set `serializeImagePulls: false` and `maxParallelImagePulls` in the kubelet config (runbook KubeScaleImagePullsSerializedWithBacklog).
          |||),
          g.stat('Max parallel pulls', [g.target('kubescale_kubelet_max_parallel_image_pulls' + n)], 'short', width=8, description=|||
            The kubelet's `maxParallelImagePulls` (0: unlimited; it applies only when pulls are not serialized). Normal: the value your node configuration sets, the same on every node.
            Another value than the fleet's: this node's kubelet config drifted from the node image's.
          |||),
          g.stat('Preloaded images missing', [g.target('kubescale_image_preload_missing' + n)], 'short', thresholds=[[1, 'orange']], width=8, description=|||
            Images of the exporter's `--image-pull.preload` list this node lacks. Normal: 0.
            Above 0: the first pod that needs one waits for a full pull. Rebuild the node image with them or pre-pull with a DaemonSet, and check image garbage collection does not evict them (runbook KubeScaleImagePreloadMissing).
          |||),
        ], height=6),
        g.row('Registry mirrors', [
          g.table('Registry host directories', [g.instantTarget('kubescale_containerd_registry_mirror_hosts' + n)], [['registry', 'Registry'], ['root', 'Root'], ['verdict', 'Verdict'], ['reason', 'Why'], ['writer', 'Written by'], ['upstream_last', 'Upstream last'], ['Value', 'Mirror hosts']], width=14, description=|||
            Each registry directory (hosts.toml) in containerd's host roots on this node: its mirror hosts, who wrote it (Spegel, Dragonfly, other), whether the registry itself stays the last host tried, and whether containerd reads it. Normal: every directory with mirrors `used`.
            `ignored`: every pull from that registry goes to the registry itself. `kube-scale-exporter check` on the node prints the one config change that fixes it (runbook KubeScaleRegistryMirrorIgnored).
          |||),
          g.table('Pull path', [g.instantTarget('kubescale_containerd_image_pull_path' + n)], [['path', 'Path'], ['reason', 'Why']], width=5, description=|||
            The pull containerd's CRI takes: `transfer` (2.x's transfer service, the default) or `local` (1.x; 2.x with use_local_image_pull or a setting that makes it fall back), and why. Normal: the same on every node of a pool.
            `transfer` with a config_path of two directories: the transfer service reads none of them.
          |||),
          g.table('Registry config_path', [g.instantTarget('kubescale_containerd_registry_config_path' + n)], [['config_path', 'config_path'], ['set_by', 'Set by']], width=5, description=|||
            The CRI's registry config_path in force: from the config, containerd 2.2+'s built-in `/etc/containerd/certs.d:/etc/docker/certs.d`, or empty (no host directory read). Normal: one directory, the one your mirrors are written to.
            Two directories on the transfer path, or empty: the mirrors there are ignored (runbook KubeScaleRegistryMirrorIgnored).
          |||),
        ], height=6),
        g.row('Exporter', [
          g.table('Collectors', [
            g.instantTarget('kubescale_scrape_collector_success' + n),
          ], [['collector', 'Collector'], ['Value', 'Last scrape succeeded']], 'bool_yes_no', width=6, description=|||
            Whether each enabled collector succeeded at this node's last scrape. Normal: yes for all.
            No: that collector's metrics are missing here; `kube-scale-exporter check` in this node's exporter pod prints the error, usually a mount, a certificate or RBAC (runbook KubeScaleCollectorFailing).
          |||),
          g.timeseries('Collector duration', [g.target('kubescale_scrape_collector_duration_seconds' + n, '{{collector}}')], 's', width=6, description=|||
            How long each collector took at the last scrape. Normal: flat, far below the scrape timeout.
            Rising: what the collector reads is slow (etcd, containerd, the kubelet's config, the netlink dump); near the timeout the collector fails and its metrics go missing.
          |||),
          g.timeseries('Samples per scrape', [g.target('scrape_samples_scraped' + n, 'samples')], 'short', thresholds=[[c.nodeSeriesBudget, 'red']], width=6, description=|||
            Samples in this node's scrape, against the node series budget (red line, %d; %d on a node that also reports its etcd member). Normal: flat, below it.
            Above: a metric family grew with what the node holds; find which from the pod's /metrics and turn off collectors you do not need (runbook KubeScaleExporterSeriesOverBudget).
          ||| % [c.nodeSeriesBudget, c.etcdNodeSeriesBudget]),
          g.table('Kubernetes watches', [g.instantTarget('kubescale_kube_watch_up' + n)], [['resource', 'Resource'], ['Value', 'Up']], 'bool_yes_no', width=6, description=|||
            Whether this node pod's list+watch of each Kubernetes resource is up. Normal: yes for every resource.
            No: the collectors that read it serve what they last saw; the pod's log names the error; check its service account's RBAC and the API server (runbook KubeScaleKubeWatchDown).
          |||),
        ]),
      ], [nodeVariable]),
  },
}
