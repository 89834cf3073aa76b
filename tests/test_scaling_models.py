"""benchmarks/scaling_models.py: the real-model scaling table's rows, by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))  # the scripts import their siblings by name
import scaling_models  # noqa: E402


def run(workers: int, wall: float, case: str = "alone", **extra):
    """One search's record as models_part keeps it (budget 16)."""
    return {
        "family": "hist_gradient_boosting",
        "case": case,
        "repeat": 0,
        "workers": workers,
        "budget": 16,
        "wall_seconds": wall,
        "trial_seconds_sum": 16 * 0.5,
        "threads_per_worker": 2 // workers or 1,
        "timed_out": False,
        **extra,
    }


def test_sync_and_async_rows_each_against_the_one_worker_search():
    runs = [
        run(1, 17.0, mode="sync"),
        run(2, 12.0, mode="sync"),
        run(2, 8.5, mode="async"),
        # two 1-worker searches side by side: 32 trials in the slower one's wall
        run(1, 15.0, case="each given half the cores", mode="sync"),
        run(1, 17.0, case="each given half the cores", mode="sync"),
    ]
    rows = {
        (row["case"], row["workers"], row["mode"]): row
        for row in scaling_models.models_rows(runs)
    }
    assert set(rows) == {
        ("alone", 1, None),
        ("alone", 2, "sync"),
        ("alone", 2, "async"),
        ("each given half the cores", 2, None),
    }
    assert rows["alone", 1, None]["speedup"] == pytest.approx(1.0)
    assert rows["alone", 2, "sync"]["speedup"] == pytest.approx(17.0 / 12.0)
    assert rows["alone", 2, "async"]["speedup"] == pytest.approx(2.0)
    side_by_side = rows["each given half the cores", 2, None]
    assert side_by_side["trials"] == 32
    assert side_by_side["speedup"] == pytest.approx(2 * 17.0 / 17.0)


def test_records_without_a_mode_are_sync_and_the_median_repeat_is_reported():
    """Runs written before async was measured have no mode: they were sync."""
    runs = [run(1, 10.0)] + [
        {**run(2, wall), "repeat": repeat}
        for repeat, wall in enumerate((9.0, 5.0, 7.0))
    ]
    (base, two) = scaling_models.models_rows(runs)
    assert (base["mode"], two["mode"]) == (None, "sync")
    assert two["wall_seconds"] == 7.0
    assert two["wall_range"] == (5.0, 9.0)
    assert two["speedup"] == pytest.approx(10.0 / 7.0)
    assert "| 2 | sync | 1 |" in scaling_models.models_table(runs)
