// The kube-scale-exporter monitoring mixin: hidden fields prometheusAlerts, prometheusRules,
// grafanaDashboards and _config, as monitoring-mixins expects. No deployment manifests.
(import 'config.libsonnet') +
(import 'alerts/alerts.libsonnet') +
(import 'rules/rules.libsonnet') +
(import 'dashboards/dashboards.libsonnet') +
(import 'lib/runbooks.libsonnet')
