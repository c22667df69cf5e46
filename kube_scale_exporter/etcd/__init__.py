"""etcd access for the etcd collector: a grpc-gateway JSON client, clusters, key counts."""
