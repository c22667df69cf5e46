// Helpers for alert text. An alert that stands for many series (one per cluster, job or
// etcd cluster) names a few of them: `examples` renders, comma-separated, at most `limit`
// of the series of `expr` that share the alert's `by` labels, sorted by label `sortBy` for a
// stable text: the highest values (topk), or with `first` the first ones in that order (for
// series whose values tie, of which topk would keep any). `show` is a label name, or a list
// of label names of which the first non-empty one is shown; `text`, if given, is the Go
// template that renders one example from `.Labels` instead. `args` (Go template expressions,
// such as '$labels.registry') fill in printf's verbs in `expr` (`%[1]s` the first) at each
// evaluation, so that the query reads only the alert's own series (a literal `%` in such an
// `expr` is written `%%`).
{
  // A selector inside an `expr` given `args`: its `%` kept literal through printf.
  literal(selector):: std.strReplace(selector, '%', '%%'),

  examples(expr, by, show, limit, sortBy=null, text=null, first=false, args=[])::
    local byList = std.split(std.strReplace(by, ' ', ''), ',');
    local same = std.join(' ', ['(eq .Labels.%s $labels.%s)' % [l, l] for l in byList]);
    local shows = if std.isArray(show) then show else [show];
    local shown = if std.length(shows) == 1 then '.Labels.%s' % shows[0]
    else 'or %s' % std.join(' ', ['.Labels.%s' % l for l in shows]);
    local flat = std.strReplace(std.rstripChars(expr, '\n'), '\n', ' ');
    local query(promql) = if args == [] then '`%s`' % promql else '(printf `%s` %s)' % [promql, std.join(' ', args)];
    local order = if sortBy == null then shows[0] else sortBy;
    local one = if text == null then '{{ %s }}' % shown else text;
    if first then
      // $shown grows by a character per example: templates have no arithmetic.
      '{{ $shown := "" }}{{ range query %s | sortByLabel "%s" }}' % [query(flat), order]
      + '{{ if and %s (lt (len $shown) %d) }}{{ if $shown }}, {{ end }}{{ $shown = printf "%%sx" $shown }}%s{{ end }}{{ end }}' % [same, limit, one]
    else
      '{{ $first := true }}{{ range query %s | sortByLabel "%s" }}' % [query('topk by (%s) (%d, %s)' % [by, limit, flat]), order]
      + '{{ if and %s }}{{ if not $first }}, {{ end }}{{ $first = false }}%s{{ end }}{{ end }}' % [same, one],

  // One etcd member as the runbooks need it: the machine first (its disk, its iostat), then
  // the member as etcd names it where that is not the machine's name (a hex id where the pod
  // reads no member list). `labels` is `$labels` (the alert's) or `.Labels` (an example's).
  member(c, labels='.Labels')::
    '{{ %(l)s.%(n)s }}{{ if ne %(l)s.member %(l)s.%(n)s }} (member {{ %(l)s.member }}){{ end }}' % { l: labels, n: c.nodeLabel },
}
