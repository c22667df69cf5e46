// PromQL fragments the rules and alerts share.
{
  // A gauge at its last value within `window` (gapTolerance). A lost scrape writes stale
  // markers, at which an instant selector stops, and our exporter restarting leaves a hole
  // of a scrape or two: either would reset the `for` of an alert holding the gauge. Only
  // absence is bridged: a new value counts at once.
  held(metric, selector, window):: 'last_over_time(%s{%s}[%s])' % [metric, selector, window],

  // Cluster label, then the node pool label where one is configured: the groups in which
  // nodes are compared with each other.
  poolBy(c):: std.join(', ', [c.clusterLabel] + (if c.nodePoolLabel == '' then [] else [c.nodePoolLabel])),
}
