"""Importing a collector module registers it; one line per collector."""
from exporter.collectors import balloon  # noqa: F401
