// A PrometheusRule for prometheus-operator users: recording rules and alerts in one object.
// Not part of the mixin itself (mixins ship no manifests); apply it with `kubectl -n NS apply`.
local mixin = import 'mixin.libsonnet';

{
  apiVersion: 'monitoring.coreos.com/v1',
  kind: 'PrometheusRule',
  metadata: {
    name: 'kube-scale-exporter',
    labels: {
      'app.kubernetes.io/name': 'kube-scale-exporter',
      'app.kubernetes.io/component': 'monitoring-mixin',
    },
  },
  spec: {
    groups: mixin.prometheusRules.groups + mixin.prometheusAlerts.groups,
  },
}
