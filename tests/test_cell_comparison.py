"""benchmarks/cell_comparison.py: the issues' cell-level targets, by hand."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "cell_comparison.py"
spec = importlib.util.spec_from_file_location("cell_comparison", SCRIPT)
cell_comparison = importlib.util.module_from_spec(spec)
spec.loader.exec_module(cell_comparison)


def store(folder: Path, losses: dict, model="space", budget=50) -> Path:
    """One JSON record per (method, dataset, repetition) -> test loss."""
    for (method, dataset, repetition), loss in losses.items():
        record = {
            "key": f"{dataset}__{model}__{method}__r{repetition}",
            "dataset": dataset,
            "task": "classification",
            "model": model,
            "method": method,
            "repetition": repetition,
            "seed": repetition,
            "budget": budget,
            "status": "ok",
            "test_loss": loss,
            "ensemble_members_distinct": 2,
            "wall_seconds": 1.0,
            "test_metrics": {"test_log_loss_ensemble": 2 * loss},
        }
        (folder / f"{record['key']}.json").write_text(json.dumps(record))
    return folder


def test_win_rate_counts_ties_half_and_wilcoxon_is_one_sided(tmp_path):
    losses = {
        # dataset a: ours wins r0, ties r1; dataset b: ours wins r0, loses r1
        ("ours", "a", 0): 0.1, ("base", "a", 0): 0.2,
        ("ours", "a", 1): 0.3, ("base", "a", 1): 0.3,
        ("ours", "b", 0): 0.1, ("base", "b", 0): 0.4,
        ("ours", "b", 1): 0.3, ("base", "b", 1): 0.2,
        # a cell the baseline lacks is not paired
        ("ours", "c", 0): 0.9,
    }  # fmt: skip
    cells = cell_comparison.load_cells([(store(tmp_path, losses), "")], "space", 50)
    result = cell_comparison.against(cells, "ours", "base")
    assert result["cells"] == 4
    assert result["win rate"] == pytest.approx((1 + 0.5 + 1 + 0) / 4)
    # per-dataset means: a 0.2 vs 0.25, b 0.2 vs 0.3: both won; with two
    # negative differences the exact one-sided signed-rank p is 1/4
    assert result["datasets won"] == 2
    assert result["Wilcoxon p (one-sided)"] == pytest.approx(0.25)
    table = cell_comparison.method_table(cells, ["ours", "base"])
    assert table.loc["ours", "cells"] == 5
    assert table.loc["base", "log-loss"] == pytest.approx(
        2 * (0.2 + 0.3 + 0.4 + 0.2) / 4
    )


def test_other_spaces_and_budgets_are_left_out_and_duplicates_refused(tmp_path):
    store(tmp_path, {("ours", "a", 0): 0.1}, model="other")
    store(tmp_path, {("ours", "a", 0): 0.1}, budget=10)
    with pytest.raises(SystemExit, match="no finished cell of model 'space'"):
        cell_comparison.load_cells([(tmp_path, "")], "space", 50)
    store(tmp_path, {("ours", "a", 0): 0.1})
    duplicate = json.loads(next(tmp_path.glob("a__space__ours__r0.json")).read_text())
    (tmp_path / "copy.json").write_text(json.dumps(duplicate))
    with pytest.raises(SystemExit, match="more than one stored cell"):
        cell_comparison.load_cells([(tmp_path, "")], "space", 50)


def test_stores_of_other_settings_are_told_apart_by_a_suffix(tmp_path):
    base, other = tmp_path / "base", tmp_path / "other"
    base.mkdir(), other.mkdir()
    store(base, {("ours", "a", 0): 0.2, ("ours", "b", 0): 0.4})
    store(other, {("ours", "a", 0): 0.1, ("ours", "b", 0): 0.4})
    cells = cell_comparison.load_cells([(base, ""), (other, "+new")], "space", 50)
    assert sorted(cells["method"].unique()) == ["ours", "ours+new"]
    result = cell_comparison.against(cells, "ours+new", "ours")
    assert result["win rate"] == pytest.approx(0.75)


def test_methods_that_share_no_cell_are_reported_not_compared(tmp_path):
    store(tmp_path, {("ours", "a", 0): 0.2, ("base", "b", 0): 0.4})
    cells = cell_comparison.load_cells([(tmp_path, "")], "space", 50)
    assert cell_comparison.against(cells, "ours", "base") == {
        "method": "ours",
        "baseline": "base",
        "cells": 0,
    }


def test_each_setting_is_compared_with_the_default_and_every_cell_is_written(
    tmp_path, monkeypatch
):
    base, slice_, bfgs = (tmp_path / name for name in ("base", "slice", "bfgs"))
    for folder in (base, slice_, bfgs):
        folder.mkdir()
    store(base, {("sego", "a", 0): 0.2, ("smbo", "a", 0): 0.3})
    store(slice_, {("sego", "a", 0): 0.1, ("smbo", "a", 0): 0.4})
    store(bfgs, {("sego", "a", 0): 0.2})
    assert cell_comparison.unsuffixed_pairs(
        ["sego", "sego+slice", "smbo+slice", "sego+bfgs"], ["", "+slice", "+bfgs"]
    ) == [("sego+slice", "sego"), ("smbo+slice", "smbo"), ("sego+bfgs", "sego")]

    results = tmp_path / "results"
    monkeypatch.setattr(cell_comparison, "RESULTS", results)
    monkeypatch.setattr(
        "sys.argv",
        ["cell_comparison.py", "--model", "space", "--name", "modes",
         "--against-unsuffixed", "--cells", str(base),
         "--cells", f"{slice_}=+slice", "--cells", f"{bfgs}=+bfgs"],
    )  # fmt: skip
    cell_comparison.main()
    comparisons = json.loads((results / "modes.json").read_text())["comparisons"]
    assert [
        (row["method"], row["baseline"], row["win rate"]) for row in comparisons
    ] == [
        ("sego+bfgs", "sego", 0.5),
        ("sego+slice", "sego", 1.0),
        ("smbo+slice", "smbo", 0.0),
    ]
    written = (results / "modes_cells.csv").read_text().splitlines()
    assert written[0].startswith("dataset,method,repetition,seed,task,test_loss")
    assert len(written) == 1 + 5


def test_a_comparison_needs_baselines_or_settings(tmp_path, monkeypatch):
    store(tmp_path, {("sego", "a", 0): 0.2})
    monkeypatch.setattr(
        "sys.argv",
        ["cell_comparison.py", "--model", "space", "--name", "x",
         "--cells", str(tmp_path)],
    )  # fmt: skip
    with pytest.raises(SystemExit, match="nothing to compare"):
        cell_comparison.main()
