"""Benchmarks: each bench/NAME.py prints figures next to a peer's on the same machine and
writes them to bench/results/NAME.md. `python -m bench [NAME...]` runs them."""
