"""What the exporter's series and the mixin's rules and dashboards cost a real
Prometheus at fleet scale. `python -m bench.scale --help`."""
