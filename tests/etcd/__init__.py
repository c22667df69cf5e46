"""Tests of the etcd collector against real etcd 3.5, 3.6 and 3.7."""
