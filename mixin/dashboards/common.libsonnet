// What every dashboard shares: the datasource and cluster variables, the cluster matcher,
// and the dashboard envelope built from the config knobs.
local g = import '../lib/grafana.libsonnet';

{
  // The matcher that restricts a query to the chosen cluster; empty in single-cluster mode.
  clusterMatcher(c):: if c.showMultiCluster then '%s="$%s"' % [c.clusterLabel, c.clusterLabel] else '',

  // `{a, b}` from the non-empty matchers, or nothing at all.
  selector(matchers)::
    local m = [x for x in matchers if x != ''];
    if m == [] then '' else '{' + std.join(', ', m) + '}',

  // Thresholds as panel descriptions quote them, from the same knobs the panels draw.
  percent(ratio):: '%g%%' % (ratio * 100),
  minutes(seconds):: '%g minutes' % (seconds / 60),
  milliseconds(seconds):: '%g ms' % (seconds * 1000),

  variables(c, extra=[])::
    [g.datasourceVariable(c.datasourceName)]
    + (
      if c.showMultiCluster then [
        g.queryVariable(c.clusterLabel, 'Cluster', 'label_values(cluster_job:kubescale_exporter_up:avg, %s)' % c.clusterLabel),
      ] else []
    )
    + extra,

  dashboard(c, file, title, description, rows, extraVariables=[])::
    g.dashboard(
      uid=c.grafanaDashboardIDs[file],
      title=c.dashboardTitlePrefix + title,
      description=description,
      tags=c.dashboardTags,
      refresh=c.dashboardRefresh,
      timeFrom=c.dashboardTimeFrom,
      timezone=c.dashboardTimezone,
      variables=self.variables(c, extraVariables),
      rows=rows,
    ),
}
