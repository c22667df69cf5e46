"""Tests of the etcd collector against real etcd 3.4 and 3.5."""
