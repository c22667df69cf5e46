// Rule groups by cadence. A rule marked `slow(rule)` (a hidden field: nothing renders) runs
// every slowInterval in a group of its own beside the one it is written in: NAME.rules ->
// NAME-views.rules for records, NAME -> NAME-slow for alerts. For what only dashboards read
// and alerts whose `for` is 15 minutes or more (config.libsonnet, slowInterval, says why).
local isSlow(rule) = std.objectHasAll(rule, 'slowInterval') && rule.slowInterval;
local slowName(name) =
  if std.endsWith(name, '.rules') then std.substr(name, 0, std.length(name) - 6) + '-views.rules'
  else name + '-slow';
{
  slow(rule):: rule { slowInterval:: true },

  // `groups` with each one's slow rules moved to its slow group, which follows it.
  split(c, groups)::
    std.flattenArrays([
      local slow = [r for r in g.rules if isSlow(r)];
      [g { rules: [r for r in g.rules if !isSlow(r)] }]
      + (if slow == [] then [] else [{ name: slowName(g.name), interval: c.slowInterval, rules: slow }])
      for g in groups
    ]),
}
