// prometheus_alerts.yaml: `jsonnet -J mixin mixin/alerts.jsonnet` (JSON is valid YAML).
(import 'mixin.libsonnet').prometheusAlerts
