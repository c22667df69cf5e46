// prometheus_rules.yaml: the recording rules the alerts and dashboards read.
(import 'mixin.libsonnet').prometheusRules
