"""Shared by every test area; each area keeps its fixtures in tests/AREA/conftest.py."""
