// One file per dashboard: `jsonnet -J mixin -m dashboards mixin/dashboards.jsonnet`.
(import 'mixin.libsonnet').grafanaDashboards
