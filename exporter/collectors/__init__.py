"""Importing a collector module registers it; one line per collector."""
