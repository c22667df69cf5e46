// The kube-scale-exporter monitoring mixin: hidden fields prometheusAlerts, prometheusRules,
// grafanaDashboards and _config, as monitoring-mixins expects. No deployment manifests.
local mixin =
  (import 'config.libsonnet') +
  (import 'alerts/alerts.libsonnet') +
  (import 'rules/rules.libsonnet') +
  (import 'dashboards/dashboards.libsonnet');

// Alerts are written without runbook_url; one pass adds it to every alert from the pattern,
// so the link cannot be forgotten and always points at the alert's own runbook section.
local withRunbooks(m) = m {
  prometheusAlerts+:: {
    groups: [
      group {
        rules: [
          rule {
            annotations+: {
              runbook_url: $._config.runbookURLPattern % std.asciiLower(rule.alert),
            },
          }
          for rule in group.rules
        ],
      }
      for group in super.groups
    ],
  },
};

withRunbooks(mixin)
