"""kube_scale_exporter/labels.py: any flood of outside names ends as a few safe label values."""

from collections import Counter

from hypothesis import given
from hypothesis import strategies as st
import pytest

from kube_scale_exporter.labels import MAX_LENGTH, OTHER, sanitize, top

pytestmark = pytest.mark.unit

SAFE = set("abcdefghijklmnopqrstuvwxyz0123456789._/-_")


@given(st.text() | st.binary())
def test_sanitized_values_are_short_safe_and_never_the_catch_all(raw):
    value = sanitize(raw)
    assert 0 < len(value) <= MAX_LENGTH + 1
    assert set(value) <= SAFE
    assert value != OTHER


@given(
    st.dictionaries(st.text(max_size=30), st.integers(0, 10**12), max_size=300), st.integers(1, 50)
)
def test_a_flood_folds_into_n_plus_one_values_keeping_every_count(counts, n):
    merged = Counter()
    for name, value in counts.items():
        merged[sanitize(name)] += value
    kept = top(merged, n)
    assert len(kept) <= n + 1
    assert sum(kept.values()) == sum(merged.values())
    named = {k: v for k, v in kept.items() if k != OTHER}
    folded = set(merged) - set(named)
    # What was folded into "other" is never larger than what was kept.
    assert all(merged[f] <= min(named.values()) for f in folded) if named and folded else True
