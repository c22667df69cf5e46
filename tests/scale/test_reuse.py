"""bench.scale --reuse: what a full run keeps for the next one, and what the next refuses."""

import json

import pytest

from bench.scale import measure
from bench.scale.synth import Segment

KEPT = [Segment(nodes=7500, start=1_764_700_000, end=1_764_704_500, interval=30)]


def _keep(directory, segments):
    (directory / measure.STORED_BLOCKS).mkdir()
    history = {
        "segments": [vars(s) for s in segments],
        "samples_written": 55_544_897,
        "synth_seconds": 270.0,
        "openmetrics_bytes": 9_300_000_000,
        "backfill_seconds": 1063.0,
        "made": "2026-12-02 19:50 UTC",
    }
    (directory / measure.STORED_HISTORY).write_text(json.dumps(history))


@pytest.mark.unit
def test_nothing_kept_yet(tmp_path):
    assert measure.stored_history(tmp_path) is None
    # A history without its blocks (a run stopped while copying them) is not one.
    (tmp_path / measure.STORED_HISTORY).write_text(json.dumps({"segments": []}))
    assert measure.stored_history(tmp_path) is None


@pytest.mark.unit
def test_kept_segments_come_back_as_segments(tmp_path):
    _keep(tmp_path, KEPT)
    stored = measure.stored_history(tmp_path)
    assert stored["segments"] == KEPT
    assert stored["backfill_seconds"] == 1063.0


@pytest.mark.unit
def test_a_run_asking_for_other_segments_is_refused_before_it_starts(tmp_path):
    reuse = tmp_path / "reuse"
    reuse.mkdir()
    _keep(reuse, KEPT)
    other = [Segment(nodes=250, start=KEPT[0].start, end=KEPT[0].end, interval=30)]
    with pytest.raises(ValueError, match="other segments"):
        measure.run(tmp_path / "work", other, reuse=reuse)
    assert not (tmp_path / "work" / "data").exists()
