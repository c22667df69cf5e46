"""One measured run shared by the scale tests: a real Prometheus on backfilled history of
two small fleets, every mixin query evaluated at both sizes (bench/scale/measure.py)."""

import pytest

from bench.scale import measure, queries
from bench.scale import budget
from bench.scale.synth import REALISTIC

# Two CI-sized fleets: big enough that every node role of the synthetic fleet's story
# (hot neighbor tables, pull backlogs, stalled pulls) appears in the larger one, small
# enough that synthesis, backfill and queries take about a minute on 2 cores.
SMALL_FLEET = 20
LARGE_FLEET = 60


@pytest.fixture(scope="session")
def scale_run(tmp_path_factory):
    groups = queries.load_rule_groups()
    window = queries.history_needed(groups, queries.dashboards())
    # The realistic fleet: the one the budgets are defined on (budget.GROUP_SAMPLES_FLEET).
    segments = measure.plan([SMALL_FLEET, LARGE_FLEET], window, fleet=REALISTIC)
    return measure.run(tmp_path_factory.mktemp("scale"), segments)


@pytest.fixture(scope="session")
def projections(scale_run):

    small, large = scale_run.segments
    return budget.project(small, large)
