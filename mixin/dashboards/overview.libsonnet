// The fleet at a glance: one row per signal. Every query reads a recording rule (or ALERTS),
// never raw per-node series, so the dashboard costs the same at 100 and at 7,500 nodes.
local g = import '../lib/grafana.libsonnet';
local common = import 'common.libsonnet';

{
  grafanaDashboards+:: {
    'kubescale-overview.json':
      local c = $._config;
      local s = common.selector([common.clusterMatcher(c)]);
      local sWith(m) = common.selector([common.clusterMatcher(c), m]);
      local k = c.topK;
      common.dashboard(c, 'kubescale-overview.json', 'Overview', 'Neighbor tables, image pulls, etcd quota and balloon headroom across the fleet.', [
        g.row('Alerts', [
          g.stat('Firing alerts', [g.target('count(ALERTS%s) or vector(0)' % sWith('alertname=~"KubeScale.*", alertstate="firing"'))], thresholds=[[1, 'red']], width=4),
          g.table('Firing and pending alerts', [g.instantTarget('count by (alertname, severity, alertstate) (ALERTS%s)' % sWith('alertname=~"KubeScale.*"'))], [['alertname', 'Alert'], ['severity', 'Severity'], ['alertstate', 'State'], ['Value', 'Count']], width=20),
        ]),
        g.row('Neighbor tables', [
          g.timeseries('Worst gc_thresh3 usage', [g.target('cluster_family:kubescale_neighbor_usage:max' + s, '{{family}}')], 'percentunit', 'Highest share of gc_thresh3 in use on any node.', [[c.neighborUsageWarning, 'orange'], [c.neighborUsageCritical, 'red']], width=6, min=0, max=1),
          g.timeseries('Nodes above warning', [g.target('cluster_family:kubescale_neighbor_nodes_above_warning:sum' + s, '{{family}}')], 'short', 'Nodes whose neighbor table uses more than %g of gc_thresh3.' % c.neighborUsageWarning, width=6),
          g.timeseries('Table overflows', [g.target('cluster_family:kubescale_neighbor_table_overflows:rate%s%s' % [c.rateInterval, s], '{{family}}')], 'ops', 'Neighbors the kernel dropped because the table was full, fleet-wide.', width=6),
          g.stat('Nodes on kernel defaults', [g.target('sum(cluster_family:kubescale_neighbor_nodes_at_kernel_default:sum%s)' % s)], 'short', 'Nodes whose gc_thresh3 is still the kernel default.', [[1, 'orange']], width=6),
          g.table('Worst nodes', [g.instantTarget('node_family:kubescale_neighbor_usage:topk%d%s' % [k, s])], [[c.nodeLabel, 'Node'], ['family', 'Family'], ['Value', 'Usage of gc_thresh3']], 'percentunit', width=24),
        ]),
        g.row('Image pulls', [
          g.timeseries('Pulls', [
            g.target('cluster:kubescale_image_pulls_queued:sum' + s, 'queued'),
            g.target('cluster:kubescale_image_pulls_in_progress:sum' + s, 'in progress'),
            g.target('cluster:kubescale_image_pull_stalled:sum' + s, 'stalled'),
          ], width=8),
          g.timeseries('Oldest unfinished pull', [g.target('cluster:kubescale_image_pull_oldest_seconds:max' + s, 'oldest')], 's', thresholds=[[c.imagePullOldestSeconds, 'red']], width=8),
          g.timeseries('Nodes', [
            g.target('cluster:kubescale_image_pull_nodes_with_backlog:sum' + s, 'with a pull backlog'),
            g.target('cluster:kubescale_kubelet_serialize_image_pulls:sum' + s, 'serializing pulls'),
            g.target('cluster:kubescale_image_preload_nodes_missing:sum' + s, 'missing preloaded images'),
          ], width=8),
          g.table('Nodes with most queued pulls', [g.instantTarget('node:kubescale_image_pulls_queued:topk%d%s' % [k, s])], [[c.nodeLabel, 'Node'], ['Value', 'Queued pulls']], width=12),
          g.table('Nodes with the oldest pull', [g.instantTarget('node:kubescale_image_pull_oldest_seconds:topk%d%s' % [k, s])], [[c.nodeLabel, 'Node'], ['Value', 'Oldest pull']], 's', width=12),
          g.timeseries('Failed pulls by registry and cause', [g.target('cluster_registry_reason:kubescale_image_pull_failures:rate%s%s' % [c.rateInterval, s], '{{registry}} {{reason}}')], 'ops', "From the kubelets' Failed events (cluster mode, imagepull_events).", stack=true, width=16),
          g.timeseries('Images in pull back-off', [g.target('cluster:kubescale_image_pulls_failing:sum' + s, 'failing')], width=8),
        ]),
        g.row('etcd', [
          g.timeseries('Backend quota used', [g.target('etcd_cluster_member:kubescale_etcd_quota_usage:ratio' + s, '{{etcd_cluster}} {{member}}')], 'percentunit', thresholds=[[c.etcdQuotaWarning, 'orange'], [c.etcdQuotaCritical, 'red']], width=12, min=0, max=1),
          g.timeseries("Time to quota at the last hour's growth", [g.target('etcd_cluster_member:kubescale_etcd_seconds_to_quota:deriv1h' + s, '{{etcd_cluster}} {{member}}')], 's', width=8),
          g.stat('Active alarms', [g.target('sum(etcd_cluster_member_alarm:kubescale_etcd_alarm_active:max%s) or vector(0)' % s)], thresholds=[[1, 'red']], width=4),
        ]),
        g.row('Balloons', [
          g.timeseries('Balloon pods', [g.target('cluster_phase:kubescale_balloon_pods:max' + s, '{{phase}}')], stack=true, width=8),
          g.timeseries('Oldest Pending balloon', [g.target('cluster:kubescale_balloon_pending_oldest_seconds:max' + s, 'oldest')], 's', thresholds=[[c.balloonPendingSeconds, 'red']], width=8),
          g.timeseries('Preemptions', [g.target('cluster:kubescale_balloon_preemptions:rate%s%s' % [c.rateInterval, s], 'preemptions')], 'ops', width=8),
        ]),
        g.row('Exporter', [
          g.timeseries('Targets up', [g.target('cluster_job:kubescale_exporter_up:avg' + s, '{{job}}')], 'percentunit', width=6, min=0, max=1),
          g.timeseries('Failing collectors', [g.target('cluster_job_collector:kubescale_scrape_collector_failures:sum' + s, '{{job}} {{collector}}')], 'short', 'Targets on which a collector failed its last scrape.', width=6),
          g.timeseries('Largest target', [g.target('cluster_job:kubescale_exporter_samples_scraped:max' + s, '{{job}}')], 'short', 'Samples in the largest scrape of each job, against the series budget.', width=6),
          g.timeseries('Kubernetes watches down', [g.target('cluster_job_resource:kubescale_kube_watches_down:sum' + s, '{{job}} {{resource}}')], 'short', 'Targets whose watch of this resource is down.', width=6),
        ]),
      ]),
  },
}
