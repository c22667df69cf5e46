(import 'overview.libsonnet') +
(import 'node.libsonnet') +
(import 'etcd.libsonnet') +
(import 'balloons.libsonnet')
