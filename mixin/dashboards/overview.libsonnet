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
      local pct = common.percent;
      common.dashboard(c, 'kubescale-overview.json', 'Overview', 'Neighbor tables, image pulls, etcd quota and balloon headroom across the fleet.', [
        g.row('Alerts', [
          g.stat('Firing alerts', [g.target('count(ALERTS%s) or vector(0)' % sWith('alertname=~"KubeScale.*", alertstate="firing"'))], thresholds=[[1, 'red']], width=4, description=|||
            How many of this mixin's alerts (KubeScale*) fire now. Normal: 0.
            Otherwise the table beside it names them; each alert's runbook link says what to check and how to fix it.
          |||),
          g.table('Firing and pending alerts', [g.instantTarget('count by (alertname, severity, alertstate) (ALERTS%s)' % sWith('alertname=~"KubeScale.*"'))], [['alertname', 'Alert'], ['severity', 'Severity'], ['alertstate', 'State'], ['Value', 'Count']], width=20, description=|||
            This mixin's alerts that fire, or are pending (waiting out their `for`), with how many series of each. Normal: empty.
            Start with critical and firing ones: in Alertmanager or Prometheus each carries its labels (which node, member or registry) and its runbook link. An alert that keeps going pending and back is a signal hovering at its threshold.
          |||),
        ]),
        g.row('Neighbor tables', [
          g.timeseries('Worst gc_thresh3 usage', [g.target('cluster_family:kubescale_neighbor_usage:max' + s, '{{family}}')], 'percentunit', thresholds=[[c.neighborUsageWarning, 'orange'], [c.neighborUsageCritical, 'red']], width=6, min=0, max=1, description=|||
            The highest share of gc_thresh3 (the kernel's hard limit on neighbor entries) in use on any node, per address family. Normal: well below %s (orange).
            At 100%% the kernel refuses new neighbors and pods on that node fail to reach new peers. Above orange: "Worst nodes" below names the nodes; raise `gc_thresh1/2/3` there (runbook KubeScaleNeighborTableNearFull).
          ||| % pct(c.neighborUsageWarning)),
          g.timeseries('Nodes above warning', [g.target('cluster_family:kubescale_neighbor_nodes_above_warning:sum' + s, '{{family}}')], 'short', width=6, description=|||
            Nodes whose neighbor table uses more than %s of gc_thresh3, per family. Normal: 0.
            A few nodes: hot spots (gateways, nodes with many hostNetwork pods). Many at once: the node image's thresholds are too low for this fleet; ship larger `gc_thresh1/2/3` in the image (runbook KubeScaleNeighborTableNearFull).
          ||| % pct(c.neighborUsageWarning)),
          g.timeseries('Table overflows', [g.target('cluster_family:kubescale_neighbor_table_overflows:rate%s%s' % [c.rateInterval, s], '{{family}}')], 'ops', width=6, description=|||
            Neighbor entries the kernel dropped because the table was full, per second, over the fleet. Normal: 0.
            Anything above 0 is an outage now: connections to new peers fail on those nodes. Find them in "Worst nodes", raise their thresholds by hand (`sysctl -w`) at once, then fix the node image (runbook KubeScaleNeighborTableOverflow).
          |||),
          g.stat('Nodes on kernel defaults', [g.target('sum(cluster_family:kubescale_neighbor_nodes_at_kernel_default:sum%s)' % s)], 'short', thresholds=[[1, 'orange']], width=6, description=|||
            Nodes whose gc_thresh3 is still the kernel default (%d). Normal: 0.
            Such a node image was never tuned: the next burst of pods or peers overflows it. Ship the sysctls in the node image or its bootstrap (runbook KubeScaleNeighborThresholdsAtKernelDefault).
          ||| % c.neighborKernelDefaultThresh3),
          g.table('Worst nodes', [g.instantTarget('node_family:kubescale_neighbor_usage:topk%d%s' % [k, s])], [[c.nodeLabel, 'Node'], ['family', 'Family'], ['Value', 'Usage of gc_thresh3']], 'percentunit', width=24, description=|||
            The %d nodes using the largest share of gc_thresh3 now, per family. Normal: all well below %s.
            A node near 100%%: open it on the Node dashboard (entries against the thresholds over time) and raise its `gc_thresh1/2/3`.
          ||| % [k, pct(c.neighborUsageWarning)]),
        ]),
        g.row('Image pulls', [
          g.timeseries('Pulls', [
            g.target('cluster:kubescale_image_pulls_queued:sum' + s, 'queued'),
            g.target('cluster:kubescale_image_pulls_in_progress:sum' + s, 'in progress'),
            g.target('cluster:kubescale_image_pull_stalled:sum' + s, 'stalled'),
          ], width=8, description=|||
            Images the fleet's nodes wait to pull (queued), are downloading (in progress), and downloads that stopped making progress (stalled). Normal: in progress follows rollouts and scale-ups, queued drains within minutes, stalled stays 0.
            Queued that keeps growing: pulls are serialized or too slow (runbook KubeScaleImagePullBacklog). Stalled: check the registry and the nodes' network path to it (runbook KubeScaleImagePullStalled).
          |||),
          g.timeseries('Oldest unfinished pull', [g.target('cluster:kubescale_image_pull_oldest_seconds:max' + s, 'oldest')], 's', thresholds=[[c.imagePullOldestSeconds, 'red']], width=8, description=|||
            Age of the oldest pull not yet finished (queued or downloading) on any node: its pods have waited that long. Normal: a few minutes at most.
            Past the red line (%s, KubeScaleImagePullTakingTooLong): "Nodes with the oldest pull" names the node; its Node dashboard tells a huge image downloading slowly from a pull queued behind another.
          ||| % common.minutes(c.imagePullOldestSeconds)),
          g.timeseries('Nodes', [
            g.target('cluster:kubescale_image_pull_nodes_with_backlog:sum' + s, 'with a pull backlog'),
            g.target('cluster:kubescale_kubelet_serialize_image_pulls:sum' + s, 'serializing pulls'),
            g.target('cluster:kubescale_image_preload_nodes_missing:sum' + s, 'missing preloaded images'),
          ], width=8, description=|||
            Nodes with images waiting behind a download (backlog), nodes whose kubelet pulls one image at a time (`serializeImagePulls: true`), and nodes lacking images of the exporter's `--image-pull.preload` list. Normal: backlog 0 outside rollouts, missing 0.
            A backlog on nodes that serialize: set `serializeImagePulls: false` and `maxParallelImagePulls` (runbook KubeScaleImagePullsSerializedWithBacklog). Missing preloads: rebuild the node image or pre-pull (runbook KubeScaleImagePreloadMissing).
          |||),
          g.table('Nodes with most queued pulls', [g.instantTarget('node:kubescale_image_pulls_queued:topk%d%s' % [k, s])], [[c.nodeLabel, 'Node'], ['Value', 'Queued pulls']], width=12, description=|||
            The %d nodes with the most images waiting for a pull now. Normal: empty, or small numbers that drain within minutes.
            A node that stays here holds its pods in ContainerCreating: open it on the Node dashboard to see whether one slow download blocks the rest.
          ||| % k),
          g.table('Nodes with the oldest pull', [g.instantTarget('node:kubescale_image_pull_oldest_seconds:topk%d%s' % [k, s])], [[c.nodeLabel, 'Node'], ['Value', 'Oldest pull']], 's', width=12, description=|||
            The %d nodes whose oldest unfinished pull started longest ago, with its age. Normal: minutes.
            Beyond %s: a huge image, a stalled download or a pull queued behind one; the node's "Download progress" on the Node dashboard tells which.
          ||| % [k, common.minutes(c.imagePullOldestSeconds)]),
          g.timeseries('Failed pulls by registry and cause', [g.target('cluster_registry_reason:kubescale_image_pull_failures:rate%s%s' % [c.rateInterval, s], '{{registry}} {{reason}}')], 'ops', stack=true, width=16, description=|||
            Failed image pulls per second by registry and cause, from the kubelets' Failed events (cluster mode, collector imagepull_events; empty when it is off). Normal: close to 0; a burst of not_found after a rollout is that rollout's wrong tag.
            rate_limited from many nodes: the registry's quota is shared behind a NAT address; pull through a mirror (runbook KubeScaleImageRegistryRateLimited). auth, tls, timeout: runbook KubeScaleImageRegistryPullsFailing.
          |||),
          g.timeseries('Images in pull back-off', [g.target('cluster:kubescale_image_pulls_failing:sum' + s, 'failing')], width=8, description=|||
            Images the fleet's nodes failed to pull and retry with back-off (pods in ImagePullBackOff). Normal: 0, or a few from a workload with a wrong image.
            Many at once: a registry refuses or rate-limits the nodes; "Failed pulls by registry and cause" says which and why.
          |||),
        ]),
        g.row('etcd', [
          g.timeseries('Backend quota used', [g.target('etcd_cluster_member:kubescale_etcd_quota_usage:ratio' + s, '{{etcd_cluster}} {{member}}')], 'percentunit', thresholds=[[c.etcdQuotaWarning, 'orange'], [c.etcdQuotaCritical, 'red']], width=12, min=0, max=1, description=|||
            Each etcd member's database file as a share of its backend quota (`--quota-backend-bytes`). Normal: steady, below %s (orange).
            At 100%% etcd raises NOSPACE and the Kubernetes API stops accepting writes. Above orange: the etcd dashboard shows whether free pages (defragment) or data (find what fills it) take the space (runbook KubeScaleEtcdDatabaseNearQuota).
          ||| % pct(c.etcdQuotaWarning)),
          g.timeseries("Time to quota at the last hour's growth", [g.target('etcd_cluster_member:kubescale_etcd_seconds_to_quota:deriv1h' + s, '{{etcd_cluster}} {{member}}')], 's', width=8, description=|||
            How long until each member's database reaches its quota if it keeps growing as in the last hour; empty while it does not grow. Normal: empty, or days.
            Hours: find what grows ("Keys per resource" on the etcd dashboard) and stop it, or compact and defragment, before the quota is hit (runbook KubeScaleEtcdDatabaseQuotaPredictedFull).
          |||),
          g.stat('Active alarms', [g.target('sum(etcd_cluster_member_alarm:kubescale_etcd_alarm_active:max%s) or vector(0)' % s)], thresholds=[[1, 'red']], width=4, description=|||
            etcd alarms raised now over every etcd cluster. Normal: 0.
            NOSPACE: that cluster refuses writes; free space, then `etcdctl alarm disarm`. CORRUPT: do not disarm; replace the member. The etcd dashboard names the member (runbook KubeScaleEtcdAlarmActive).
          |||),
        ]),
        g.row('Balloons', [
          g.timeseries('Balloon pods', [g.target('cluster_phase:kubescale_balloon_pods:max' + s, '{{phase}}')], stack=true, width=8, description=|||
            Balloon pods (low-priority placeholders that keep spare nodes warm) by phase. Normal: the configured number Running, none Pending for long.
            Pending after a burst: real pods took the headroom and cluster-autoscaler is adding nodes. Running at 0: no warm headroom left (runbook KubeScaleBalloonHeadroomExhausted).
          |||),
          g.timeseries('Oldest Pending balloon', [g.target('cluster:kubescale_balloon_pending_oldest_seconds:max' + s, 'oldest')], 's', thresholds=[[c.balloonPendingSeconds, 'red']], width=8, description=|||
            How long the oldest Pending balloon has waited for a node. Normal: empty, or a node's boot time.
            Past the red line (%s): cluster-autoscaler does not bring nodes; check its status ConfigMap, the node groups' maximum size and the cloud quota (runbook KubeScaleBalloonPendingTooLong).
          ||| % common.minutes(c.balloonPendingSeconds)),
          g.timeseries('Preemptions', [g.target('cluster:kubescale_balloon_preemptions:rate%s%s' % [c.rateInterval, s], 'preemptions')], 'ops', width=8, description=|||
            Balloons evicted per second to make room for real pods. Normal: spikes at scale-ups: the headroom doing its job.
            Preemptions that never stop: the headroom is smaller than the load's bursts; add balloon replicas or give each more requests.
          |||),
        ]),
        g.row('Exporter', [
          g.timeseries('Targets up', [g.target('cluster_job:kubescale_exporter_up:avg' + s, '{{job}}')], 'percentunit', width=6, min=0, max=1, description=|||
            Share of each kube-scale-exporter job's targets whose last scrape succeeded. Normal: 100%, with short dips during rollouts.
            Lower for long: those nodes' signals are blind; check the pods (OOMKilled, scheduling, a bad flag) (runbook KubeScaleExporterTargetsDown). A job missing here altogether: runbook KubeScaleExporterTargetMissing.
          |||),
          g.timeseries('Failing collectors', [g.target('cluster_job_collector:kubescale_scrape_collector_failures:sum' + s, '{{job}} {{collector}}')], 'short', width=6, description=|||
            Targets on which a collector failed its last scrape, per job and collector. Normal: 0.
            Above 0: that collector's metrics are missing there while the others work; the exporter's log on such a target names the error (certificates, a missing mount, RBAC) (runbook KubeScaleCollectorFailing).
          |||),
          g.timeseries('Largest target', [g.target('cluster_job:kubescale_exporter_samples_scraped:max' + s, '{{job}}')], 'short', width=6, description=|||
            Samples in the largest scrape of each job. Normal: flat, within the series budget (%d per node, %d for a node that also reports its etcd member, %d for the cluster-mode exporter).
            Growing: a metric family grows with what the node holds; at thousands of nodes each extra series costs thousands in Prometheus (runbook KubeScaleExporterSeriesOverBudget).
          ||| % [c.nodeSeriesBudget, c.etcdNodeSeriesBudget, c.clusterSeriesBudget]),
          g.timeseries('Kubernetes watches down', [g.target('cluster_job_resource:kubescale_kube_watches_down:sum' + s, '{{job}} {{resource}}')], 'short', width=6, description=|||
            Targets whose list+watch of a Kubernetes resource is down, per resource. Normal: 0.
            Above 0 for minutes: the collectors that read it serve what they last saw; the exporter's log names the error (401/403, TLS); check its RBAC and the API server (runbook KubeScaleKubeWatchDown).
          |||),
        ]),
      ]),
  },
}
