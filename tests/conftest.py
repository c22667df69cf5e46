"""Shared by every test area; each area keeps its fixtures in tests/AREA/conftest.py."""

import os

# tests/e2e brings up a real cluster on this host (root, minutes, host changes undone at the
# end): only `make e2e` (KSE_E2E=1) collects it, never the main suite.
collect_ignore = [] if os.environ.get("KSE_E2E") == "1" else ["e2e"]
