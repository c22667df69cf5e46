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
      common.dashboard(c, 'kubescale-node.json', 'Node', 'Neighbor tables, image pulls and the exporter on one node.', [
        g.row('Neighbor tables', [
          g.timeseries('Entries and thresholds', [
            g.target('kubescale_neighbor_entries' + n, '{{family}} entries'),
            g.target('kubescale_neighbor_gc_eligible_entries' + n, '{{family}} GC-eligible'),
            g.target('kubescale_neighbor_gc_thresh2' + n, '{{family}} gc_thresh2'),
            g.target('kubescale_neighbor_gc_thresh3' + n, '{{family}} gc_thresh3'),
          ], 'short', 'GC-eligible entries above gc_thresh3 make the kernel drop new neighbors.', width=12),
          g.timeseries('Usage of gc_thresh3', [g.target('node_family:kubescale_neighbor_usage:ratio' + n, '{{family}}')], 'percentunit', thresholds=[[c.neighborUsageWarning, 'orange'], [c.neighborUsageCritical, 'red']], width=6, min=0, max=1),
          g.timeseries('Overflows and forced GC', [
            g.target('rate(kubescale_neighbor_table_overflows_total%s[$__rate_interval])' % n, '{{family}} overflows'),
            g.target('rate(kubescale_neighbor_forced_gc_runs_total%s[$__rate_interval])' % n, '{{family}} forced GC runs'),
          ], 'ops', width=6),
        ]),
        g.row('Image pulls', [
          g.timeseries('Pulls', [
            g.target('kubescale_image_pulls_queued' + n, 'queued'),
            g.target('kubescale_image_pulls_in_progress' + n, 'in progress'),
            g.target('kubescale_image_pull_stalled' + n, 'stalled'),
            g.target('kubescale_image_pulls_failing' + n, 'in back-off'),
          ], width=8),
          g.timeseries('Oldest unfinished pull', [g.target('kubescale_image_pull_oldest_seconds' + n, 'oldest')], 's', thresholds=[[c.imagePullOldestSeconds, 'red']], width=8),
          g.timeseries('Download progress', [
            g.target('kubescale_image_pull_downloaded_bytes' + n, 'downloaded'),
            g.target('kubescale_image_pull_expected_bytes' + n, 'expected'),
          ], 'bytes', width=8),
          g.stat('Serialized pulls', [g.target('kubescale_kubelet_serialize_image_pulls' + n)], 'bool_yes_no', "The kubelet's serializeImagePulls.", [[1, 'orange']], width=8),
          g.stat('Max parallel pulls', [g.target('kubescale_kubelet_max_parallel_image_pulls' + n)], 'short', "The kubelet's maxParallelImagePulls (0: unlimited).", width=8),
          g.stat('Preloaded images missing', [g.target('kubescale_image_preload_missing' + n)], 'short', thresholds=[[1, 'orange']], width=8),
        ], height=6),
        g.row('Exporter', [
          g.table('Collectors', [
            g.instantTarget('kubescale_scrape_collector_success' + n),
          ], [['collector', 'Collector'], ['Value', 'Last scrape succeeded']], 'bool_yes_no', width=6),
          g.timeseries('Collector duration', [g.target('kubescale_scrape_collector_duration_seconds' + n, '{{collector}}')], 's', width=6),
          g.timeseries('Samples per scrape', [g.target('scrape_samples_scraped' + n, 'samples')], 'short', thresholds=[[c.nodeSeriesBudget, 'red']], width=6),
          g.table('Kubernetes watches', [g.instantTarget('kubescale_kube_watch_up' + n)], [['resource', 'Resource'], ['Value', 'Up']], 'bool_yes_no', width=6),
        ]),
      ], [nodeVariable]),
  },
}
