// pint's configuration: `make lint` runs its offline checks on rules/; tests/mixin/test_live.py
// adds a `prometheus` block (a live Prometheus scraping the exporter, 3.13 and then 3.16) and
// runs the online ones too. Every check is on; each one turned off here says why.

rule {
  // rate() of a counter collapsed over the pods that read one etcd member: the same
  // counter from each reader, so the max is that counter, held over gaps (the comment of
  // the performance group in mixin/rules/etcd.libsonnet says why the collapse comes first).
  match {
    name = "etcd_cluster_member:kubescale_etcd_.*rate.*"
  }
  disable = ["promql/rate"]
}

rule {
  // The dashboard views (the *-views.rules groups, every slowInterval) read records of the
  // 30 s groups on purpose (the image-pull totals and tables their node:*:nonzero, the
  // near-full count node_family:kubescale_neighbor_usage_high:ratio, etcd's fragmentation
  // and growth its per-member sizes, the etcd rates their collapsed counters): a view at
  // most one evaluation behind costs nothing a dashboard shows, and reading the raw
  // per-node series again would double their cost at 7,500 nodes (docs/sizing.md).
  match {
    name = "(cluster_family:kubescale_neighbor_nodes_above_warning:sum|cluster:kubescale_image_pulls_(queued|in_progress):sum|cluster:kubescale_image_pull_(stalled:sum|oldest_seconds:max|nodes_with_backlog:sum)|node:kubescale_(image_pulls_queued|image_pull_oldest_seconds):topk10|etcd_cluster_member:kubescale_etcd_(fragmentation:ratio|db_size_bytes:deriv1h|seconds_to_quota:deriv1h|client_sent_bytes:rate5m|range_requests:rate5m))"
  }
  disable = ["rule/dependency"]
}

rule {
  // The one headroom view (kube-scale-exporter-capacitybuffer-views.rules, every
  // slowInterval) adds the balloon and buffer records by method: reading them, at most one
  // evaluation behind, keeps each method's preferLive read in one place, and only the
  // dashboard reads the sums.
  match {
    name = "cluster_method_resource_unit:kubescale_headroom_(reserved|placeable):sum"
  }
  disable = ["rule/dependency"]
}

check "promql/series" {
  // The online run (tests/mixin/test_live.py) queries a Prometheus a minute old, whose etcd
  // series start with the etcd collector's first reading, after the scrapes began: look
  // back over the last 20s at a fine step (the test waits until every series has been
  // there for 30s), not over pint's week at 5m steps, which would call them intermittent.
  lookbackRange = "20s"
  lookbackStep  = "2s"
  // Series the live stack (one host: the exporter in both modes, a real etcd, Prometheus
  // scraping itself as prometheus-k8s) cannot have; pint reports them as warnings naming
  // the pattern, which the test accepts and nothing else. Whether the rules read them right
  // is tests/mixin/promtool's and the fleets' business, on series with these names.
  ignoreMetrics = [
    // Cluster mode's Kubernetes collectors (balloons, CapacityBuffers, watches) and the rules
    // over them: no API server in the stack.
    ".*kubescale_balloon_.*",
    ".*kubescale_capacitybuffer_.*",
    ".*kubescale_kube_watch.*",
    // Node mode's containerd and kubelet collectors and the rules over them: no containerd
    // or kubelet in the stack.
    ".*kubescale_image_pull.*",
    ".*kubescale_image_preload_missing.*",
    ".*kubescale_containerd_.*",
    ".*kubescale_kubelet_serialize_image_pulls.*",
    // cAdvisor's, served by a kubelet.
    "container_memory_working_set_bytes",
    "container_spec_memory_limit_bytes",
    // Recorded only while a table overflows (`> 0`), or is near full: a healthy stack has none.
    "node_family:kubescale_neighbor_table_overflows:increase5m",
    "node_family:kubescale_neighbor_usage_high:ratio",
  ]
  // The stack reads its etcd from the cluster-mode Deployment (--etcd.cluster) only: the
  // node placement's job (--etcd.local) has none of these, the same collector's series.
  ignoreLabelsValue = {
    "kubescale_etcd_alarm_active{job=\"kube-scale-exporter-node\"}" = ["job"]
    "kubescale_etcd_backend_commit_duration_seconds_bucket{job=\"kube-scale-exporter-node\"}" = ["job"]
    "kubescale_etcd_client_sent_bytes_total{job=\"kube-scale-exporter-node\"}" = ["job"]
    "kubescale_etcd_db_size_bytes{job=\"kube-scale-exporter-node\"}" = ["job"]
    "kubescale_etcd_db_size_in_use_bytes{job=\"kube-scale-exporter-node\"}" = ["job"]
    "kubescale_etcd_is_leader{job=\"kube-scale-exporter-node\"}" = ["job"]
    "kubescale_etcd_keys{job=\"kube-scale-exporter-node\"}" = ["job"]
    "kubescale_etcd_quota_bytes{job=\"kube-scale-exporter-node\"}" = ["job"]
    "kubescale_etcd_range_requests_total{job=\"kube-scale-exporter-node\"}" = ["job"]
    "kubescale_etcd_up{job=\"kube-scale-exporter-node\"}" = ["job"]
    "kubescale_etcd_wal_fsync_duration_seconds_bucket{job=\"kube-scale-exporter-node\"}" = ["job"]
    "kubescale_etcd_writes_refused_total{job=\"kube-scale-exporter-node\"}" = ["job"]
    // count_values of `up`: value="0" exists only while a target is down, which a healthy
    // stack never has (the rule falls back to 0 * the target count for that).
    "cluster_job_value:kubescale_exporter_up:count{value=\"0\"}" = ["value"]
  }
}
