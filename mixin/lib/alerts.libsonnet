// Helpers for alert text. An alert that stands for many series (one per cluster, job or
// etcd cluster) names a few of them: `examples` renders, comma-separated, at most `limit`
// of the series of `expr` that share the alert's `by` labels (topk: the highest values),
// sorted by label `sortBy` for a stable text. `show` is a label name, or a list of label
// names of which the first non-empty one is shown.
{
  examples(expr, by, show, limit, sortBy=null)::
    local byList = std.split(std.strReplace(by, ' ', ''), ',');
    local same = std.join(' ', ['(eq .Labels.%s $labels.%s)' % [l, l] for l in byList]);
    local shows = if std.isArray(show) then show else [show];
    local shown = if std.length(shows) == 1 then '.Labels.%s' % shows[0]
    else 'or %s' % std.join(' ', ['.Labels.%s' % l for l in shows]);
    local query = std.strReplace(std.rstripChars(expr, '\n'), '\n', ' ');
    '{{ $first := true }}{{ range query `topk by (%s) (%d, %s)` | sortByLabel "%s" }}' % [by, limit, query, if sortBy == null then shows[0] else sortBy]
    + '{{ if and %s }}{{ if not $first }}, {{ end }}{{ $first = false }}{{ %s }}{{ end }}{{ end }}' % [same, shown],
}
