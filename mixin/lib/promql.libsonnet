// PromQL fragments the rules and alerts share.
{
  // A gauge at its last value within `window` (gapTolerance). A lost scrape writes stale
  // markers, at which an instant selector stops, and our exporter restarting leaves a hole
  // of a scrape or two: either would reset the `for` of an alert holding the gauge. Only
  // absence is bridged: a new value counts at once.
  held(metric, selector, window):: 'last_over_time(%s{%s}[%s])' % [metric, selector, window],

  // A gauge several targets serve, aggregated (max by its labels): `live`, read at the
  // instant, and, for a label set no target serves now, `held`, the same aggregation of the
  // gauge held over gapTolerance. An exporter restarting under a new instance label (a
  // rollout, a reschedule) leaves stale markers on the old pod's series, which the instant
  // read drops at once: the new pod's value counts from its first scrape (the highest of
  // the held values alone would show the old pod's for gapTolerance where it was higher:
  // 10 Running balloons while 8 run). `unless` ('on (LABELS) SERIES') narrows the fallback
  // to the groups where SERIES is absent now, for a gauge whose label sets come and go
  // while its target answers. Counters stay with `held` alone: their newest reading is
  // also their highest.
  preferLive(live, held, unless='')::
    local indent(expr) = std.strReplace(std.rstripChars(expr, '\n'), '\n', '\n  ');
    '%s\nor\n%s\n' % [
      std.rstripChars(live, '\n'),
      if unless == '' then std.rstripChars(held, '\n')
      else '(\n  %s\n  unless %s\n)' % [indent(held), unless],
    ],

  // Cluster label, then the node pool label where one is configured: the groups in which
  // nodes are compared with each other.
  poolBy(c):: std.join(', ', [c.clusterLabel] + (if c.nodePoolLabel == '' then [] else [c.nodePoolLabel])),
}
