"""bench.scale.gocpu: a real Prometheus' CPU put on its rule evaluation, from its profiles."""

import re

import pytest
import yaml

from bench.scale import gocpu
from bench.scale.live import RULE_EVALUATION, RULE_EVALUATION_PARTS
from bench.scale.prom import Prometheus

# A subquery of 360,000 steps every second, on no series (a fresh server has none yet):
# rule evaluation well above the profile's 10 ms sampling, and allocating.
HEAVY = "sum_over_time(vector(1)[1h:10ms])"


@pytest.mark.integration
def test_rule_evaluation_share_of_a_live_prometheus(tmp_path):
    rules = tmp_path / "heavy.rules.yml"
    rules.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "heavy",
                        "interval": "1s",
                        "rules": [{"record": "test:heavy", "expr": HEAVY}],
                    }
                ]
            }
        )
    )
    data = tmp_path / "data"
    with Prometheus(tmp_path, data, rule_files=[rules]) as prom:
        cpu_profile, allocs_profile = gocpu.fetch(prom.url, 5, tmp_path / "profiles")
        evaluations = prom.metric("prometheus_rule_evaluations_total")  # the one group's
    share = gocpu.share(cpu_profile, allocs_profile, RULE_EVALUATION, 5)
    assert evaluations >= 5
    # Most of what this Prometheus does is the heavy rule, and all of its CPU is sampled.
    assert 0.05 <= share.part <= share.cpu
    assert share.part >= 0.5 * (share.cpu - share.gc_background)
    assert 0 < share.alloc_fraction <= 1
    assert share.part <= share.attributed <= share.part + share.gc_background
    # A recording rule: its time is its query's, and it expands no template.
    parts = gocpu.within(cpu_profile, RULE_EVALUATION, RULE_EVALUATION_PARTS)
    assert 0.8 * share.part <= parts["queries"] <= share.part
    assert parts["templates"] == 0
    nothing = gocpu.share(cpu_profile, allocs_profile, re.compile(r"no\.such\.Function"), 5)
    assert (nothing.part, nothing.alloc_fraction, nothing.attributed) == (0, 0, 0)
    assert nothing.cpu == share.cpu
