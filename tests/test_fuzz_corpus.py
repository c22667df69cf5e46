"""fuzz/: every harness has seeds to replay, and every corpus folder belongs to a harness
(`make fuzz-replay` runs each folder through the harness of its name)."""

import pytest

from fuzz import CORPUS, corpus_files, harness_names


@pytest.mark.unit
def test_every_harness_has_seeds_and_every_corpus_a_harness():
    names = harness_names()
    assert sorted(p.name for p in CORPUS.iterdir() if p.is_dir()) == names
    assert [n for n in names if not corpus_files(n)] == []
