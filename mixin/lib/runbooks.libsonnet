// Adds runbook_url to every alert that has none, from runbookURLPattern: the link cannot be
// forgotten and points at the alert's own section of docs/runbooks.md. An alert that already
// carries a runbook_url (one's own runbook, in a layer below this one) keeps it. Mix it in
// last; a stack that adds groups of its own may mix it in again after them.
{
  prometheusAlerts+:: {
    groups: [
      group {
        rules: [
          if std.objectHas(std.get(rule, 'annotations', {}), 'runbook_url') then rule
          else rule { annotations+: { runbook_url: $._config.runbookURLPattern % std.asciiLower(rule.alert) } }
          for rule in group.rules
        ],
      }
      for group in super.groups
    ],
  },
}
