// prometheus_selfprotection_alerts.yaml: the opt-in Prometheus self-protection group alone
// (prometheusSelfProtection), for users of the rendered files: add it to rule_files.
local mixin = (import 'mixin.libsonnet') + { _config+:: { prometheusSelfProtection: true } };
{
  groups: [g for g in mixin.prometheusAlerts.groups if g.name == 'kube-scale-exporter-prometheus'],
}
