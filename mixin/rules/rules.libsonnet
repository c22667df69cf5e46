(import 'neighbor.libsonnet') +
(import 'imagepull.libsonnet') +
(import 'etcd.libsonnet') +
(import 'balloon.libsonnet') +
(import 'capacitybuffer.libsonnet') +
(import 'exporter.libsonnet')
