"""Every golden exposition passes `promtool check metrics`, as Prometheus would see it.

The golden tests (tests/AREA/test_*golden*.py) compare a collector's output with its file
byte for byte and run in the unit tier; the lint needs promtool, so it is here, once per
file, with the promtool of each Prometheus release the tests run (3.13 and 3.16).
"""

import pytest

from testbed.golden import GOLDEN_DIR, promtool_check

pytestmark = pytest.mark.integration
GOLDEN_FILES = sorted(GOLDEN_DIR.glob("*.prom"))


def test_there_are_golden_files():
    assert len(GOLDEN_FILES) >= 2


@pytest.mark.parametrize("path", GOLDEN_FILES, ids=lambda p: p.name)
def test_promtool_accepts_the_golden_exposition(path):
    promtool_check(path.read_text())
