"""A small raw NETLINK_ROUTE client: just what the neighbor collectors need.

pyroute2 decodes every message into dicts, which costs ~8 s for a 100k-entry neighbor
dump, and it drops `table_fulls` from NDTA_STATS; reading the fixed kernel structs with
`struct` is ~80x faster and complete.
"""
