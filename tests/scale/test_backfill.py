"""bench.scale.backfill: the recording rules' backfill records every group, wherever the
history starts against promtool's 2 h block boundaries."""

import time

import pytest

from bench.scale import backfill
from bench.scale.prom import SCRAPE_INTERVAL, Prometheus

BLOCK = backfill.RULES_BLOCK_SECONDS


@pytest.mark.unit
@pytest.mark.parametrize(
    ("before_boundary", "moved"),
    [
        (0, False),  # on a boundary: the first cut is a whole block
        (1, True),
        (SCRAPE_INTERVAL, True),  # the realistic 7,500-node run: 30 s before one
        (SCRAPE_INTERVAL + 1, False),
        (2 * SCRAPE_INTERVAL, False),
        (BLOCK - SCRAPE_INTERVAL, False),
    ],
)
def test_rules_start_leaves_the_first_cut_longer_than_an_interval(before_boundary, moved):
    boundary = 1_796_479_200  # the one the realistic run's history began 30 s before
    assert boundary % BLOCK == 0
    start = boundary - before_boundary
    got = backfill.rules_start(start)
    assert got == (start - SCRAPE_INTERVAL if moved else start)
    assert got <= start
    to_boundary = -got % BLOCK
    assert to_boundary == 0 or to_boundary > SCRAPE_INTERVAL


GROUPS = 150


@pytest.mark.integration
def test_every_group_recorded_when_history_starts_an_interval_before_a_block_boundary(tmp_path):
    """The realistic 7,500-node run began 30 s before a 2 h boundary: promtool's first cut
    was [start, boundary - 1 s], and a group whose evaluations fall in that cut's last second
    (its offset, hashed from its name and file: 1 group in 30) was recorded nowhere, its
    whole range dropped. Without the fix about 5 of these 150 one-rule groups go missing
    (all are recorded in about 0.6 % of runs: the file's path, so the offsets, differ per
    run); each rule reads no history (vector(1)), so only the backfill's own range counts."""
    data = tmp_path / "data"
    data.mkdir()
    boundary = (int(time.time()) - 86400) // BLOCK * BLOCK
    start, end = boundary - SCRAPE_INTERVAL, boundary + 3 * SCRAPE_INTERVAL
    groups = [
        {
            "name": f"test-{i}.rules",
            "interval": "2m",
            "rules": [{"record": f"test:group{i}:one", "expr": "vector(1)"}],
        }
        for i in range(GROUPS)
    ]
    backfill.recording_rules(groups, data, tmp_path, start, end)
    with Prometheus(tmp_path, data) as prom:
        before = {
            int(prom.scalar(f"timestamp(test:group{i}:one)", boundary - 1))
            for i in range(0, GROUPS, 10)
        }
        recorded = prom.scalar('count(count by (__name__) ({__name__=~"test:group.*"}))', end)
    assert recorded == GROUPS, f"{GROUPS - recorded:.0f} of {GROUPS} groups recorded nothing"
    # The cut before the boundary is recorded too, from where the backfill began.
    assert all(start - SCRAPE_INTERVAL <= t < boundary for t in before), before
