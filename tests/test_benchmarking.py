"""The benchmark framework shared by the pipeline and the scripts: cells, stores,
the runner, the scripts' statistics. The pipeline's use of it is tested in
tests/pipelines/test_benchmark.py, the grid's keys in tests/core/test_grid.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats
from sklearn.dummy import DummyClassifier, DummyRegressor

from ensemble_bo.benchmarking.runner import resume, run_cells
from ensemble_bo.benchmarking.store import CellFolder, CellLines
from ensemble_bo.benchmarking.tables import wilcoxon_p, wins
from ensemble_bo.core.grid import (
    ToolCell,
    grid_cells,
    parse_settings,
    run_cell,
    run_tool_cell,
)
from tests.core.test_grid import CONF, GRID, PARAMETERS, fast

PROJECT = Path(__file__).resolve().parents[1]
RESULTS = PROJECT / "benchmarks" / "results"
DATA_PROCESSING = CONF["data_processing"]


def diabetes() -> pd.DataFrame:
    return pd.read_csv(PROJECT / "data/01_raw/diabetes.csv")


def fit_mean(cell, X, y):
    """A tool that predicts the training mean (picklable: a module function)."""
    return DummyRegressor().fit(X, y), {"fit_wall_seconds": 0.0, "tool_note": 1}


def fit_prior(cell, X, y):
    """A classifier that predicts the training class frequencies for every row."""
    return DummyClassifier(strategy="prior").fit(X, y), {"fit_wall_seconds": 0.0}


def fit_broken(cell, X, y):
    raise RuntimeError(f"{cell.tool} cannot fit")


def run_mean(cell, raw, data_processing):
    return run_tool_cell(cell, raw, data_processing, fit_mean)


def tool_cell(tool="mean", repetition=0, **fields) -> ToolCell:
    return ToolCell("diabetes", repetition, repetition, tool, **fields)


def record(key, status="ok", **fields):
    return {"key": key, "status": status, **fields}


# --- cells ----------------------------------------------------------------------------


def test_a_tool_cell_s_key_and_record_name_only_its_given_coordinates():
    cell = ToolCell(
        "wine",
        2,
        5,
        "flaml",
        (("n_splits", 5), ("list", (1, 2))),
        time_budget=10.0,
        task="classification",
    )
    assert cell.key == "wine/r2/flaml/T10"
    assert cell.coordinates == {
        "key": "wine/r2/flaml/T10",
        "dataset": "wine",
        "task": "classification",
        "repetition": 2,
        "seed": 5,
        "tool": "flaml",
        "time_budget": 10.0,
        "setup": {"n_splits": 5, "list": [1, 2]},  # as JSON gives it back
    }
    spaced = ToolCell("concrete", 0, 0, "segor", time_budget=2.5, space="svr")
    assert spaced.key == "concrete/svr/r0/segor/T2.5"
    assert "task" not in spaced.coordinates and spaced.coordinates["space"] == "svr"
    assert ToolCell("branin", 3, 3, "ours_map").key == "branin/r3/ours_map"
    failed = spaced.failed_record(MemoryError("gone"))
    assert failed == {
        **spaced.coordinates,
        "status": "failed",
        "error": "MemoryError: gone",
    }


def test_a_tool_cell_is_scored_on_the_pipeline_s_split_of_its_seed():
    raw = diabetes()
    result = run_tool_cell(tool_cell(task="regression"), raw, DATA_PROCESSING, fit_mean)
    assert result["status"] == "ok" and result["tool_note"] == 1
    # by hand: the training mean against the test part, standardized by the
    # training part's std
    from ensemble_bo.core.preparation import split_dataset  # noqa: PLC0415

    split = split_dataset(raw, "diabetes", DATA_PROCESSING, 0)
    train = split.train_target.astype(float)
    expected = np.mean(((train.mean() - split.test_target) / train.std(ddof=0)) ** 2)
    assert result["test_loss"] == pytest.approx(expected, rel=1e-12)
    assert (result["train_rows"], result["test_rows"]) == (
        len(split.train_target),
        len(split.test_target),
    )
    assert result["cell_wall_seconds"] > 0 and result["finished"]


def test_a_classification_cell_also_records_the_test_probability_metrics():
    raw = pd.read_csv(PROJECT / "data/01_raw/pima.csv")
    cell = ToolCell("pima", 0, 0, "prior", task="classification")
    result = run_tool_cell(cell, raw, DATA_PROCESSING, fit_prior)
    from ensemble_bo.core.preparation import split_dataset  # noqa: PLC0415

    split = split_dataset(raw, "pima", DATA_PROCESSING, 0)
    # by hand: every row gets the training frequencies (p0, p1); the majority
    # class is predicted everywhere
    labels = np.sort(split.train_target.unique())
    p = split.train_target.value_counts(normalize=True).reindex(labels).to_numpy()
    truth = (split.test_target.to_numpy()[:, None] == labels[None, :]).astype(float)
    assert result["test_loss"] == pytest.approx(1 - truth[:, np.argmax(p)].mean())
    assert result["test_log_loss"] == pytest.approx(-np.log(truth @ p).mean())
    assert result["test_brier"] == pytest.approx(((truth - p) ** 2).sum(axis=1).mean())
    assert result["test_roc_auc"] == pytest.approx(0.5)  # one score for every row
    regression = run_tool_cell(
        tool_cell(task="regression"), diabetes(), DATA_PROCESSING, fit_mean
    )
    assert "test_log_loss" not in regression


def fit_stopped_by_ctrl_c(cell, X, y):
    try:
        raise KeyboardInterrupt
    except KeyboardInterrupt as pressed:
        raise RuntimeError("search stopped after 2 of 8 iterations") from pressed


def test_ctrl_c_in_a_cell_stops_the_grid_instead_of_failing_the_cell(monkeypatch):
    # a search stopped by Ctrl-C raises SearchInterrupted from the
    # KeyboardInterrupt: the cell must not take it for a broken cell
    with pytest.raises(KeyboardInterrupt):
        run_tool_cell(tool_cell(), diabetes(), DATA_PROCESSING, fit_stopped_by_ctrl_c)
    settings = parse_settings(
        {**GRID, "datasets": ["diabetes"], "methods": ["random_search"], "budget": 3}
    )
    (cell, _) = grid_cells(
        settings, {"diabetes": diabetes()}, DATA_PROCESSING, PARAMETERS
    )
    monkeypatch.setattr(
        "ensemble_bo.core.grid._finished_cell",
        lambda *args: fit_stopped_by_ctrl_c(None, None, None),
    )
    with pytest.raises(KeyboardInterrupt):
        run_cell(cell, diabetes(), DATA_PROCESSING)


def test_a_tool_cell_that_raises_is_a_failed_record_with_its_traceback():
    raw = diabetes()
    broken = run_tool_cell(tool_cell(), raw, DATA_PROCESSING, fit_broken)
    assert broken["status"] == "failed"
    assert broken["error"] == "RuntimeError: mean cannot fit"
    assert "fit_broken" in broken["traceback"] and "test_loss" not in broken
    wrong = run_tool_cell(
        tool_cell(task="classification"), raw, DATA_PROCESSING, fit_mean
    )
    assert wrong["error"] == "ValueError: diabetes is not a classification dataset"


# --- stores ---------------------------------------------------------------------------


@pytest.fixture(params=["folder", "lines"])
def store(request, tmp_path):
    if request.param == "folder":
        return CellFolder(tmp_path / "cells")
    return CellLines(tmp_path / "cells.jsonl")


def test_both_stores_round_trip_records_by_key(store):
    assert store.keys() == [] and not store.has("a") and store.records() == {}
    store.put("b", record("b", loss=0.1 + 0.2, curve=[1.0, None]))
    store.put("a", record("a", loss=1.0))
    store.put("b", record("b", loss=0.5))  # the latest record of a key wins
    again = type(store)(store.path)  # read back from disk
    assert again.keys() == ["a", "b"] and again.has("a") and len(again) == 2
    assert again.get("b") == record("b", loss=0.5)
    assert again.records()["a"]["loss"] == 1.0
    with pytest.raises(KeyError, match="'zz'"):
        again.get("zz")


def test_the_lines_store_keeps_failed_cells_and_skips_a_cut_line(tmp_path):
    path = tmp_path / "cells.jsonl"
    store = CellLines(path)
    assert store.keeps_failed and not CellFolder(tmp_path).keeps_failed
    store.put("x/r0", record("x/r0", "failed", error="boom"))
    store.put("x/r1", record("x/r1", value=np.float64(0.25), count=np.int64(3)))
    with path.open("a") as stream:
        stream.write('{"key": "x/r2", "stat')  # a kill in the middle of a line
    again = CellLines(path)
    assert again.keys() == ["x/r0", "x/r1"]
    assert again.get("x/r1")["value"] == 0.25 and again.get("x/r1")["count"] == 3
    # what the writer holds is what a reader of the file gets
    assert store.get("x/r1") == again.get("x/r1")
    with pytest.raises(ValueError, match="record of 'a' put under 'b'"):
        store.put("b", record("a"))


# --- the runner -----------------------------------------------------------------------


def test_resume_skips_finished_cells_and_reruns_missing_and_failed_ones(tmp_path):
    cells = [tool_cell(repetition=r) for r in range(3)]
    store = CellLines(tmp_path / "cells.jsonl")
    store.put(cells[0].key, {**cells[0].coordinates, "status": "ok", "test_loss": 1})
    store.put(cells[1].key, cells[1].failed_record(RuntimeError("x")))
    finished, pending = resume(cells, store)
    assert list(finished) == [cells[0].key] and finished[cells[0].key]["test_loss"] == 1
    assert pending == cells[1:]


def test_resume_refuses_a_store_of_other_settings_naming_the_cell(tmp_path):
    cell = tool_cell(setup=(("budget", 50),))
    store = CellLines(tmp_path / "cells.jsonl")
    other = tool_cell(setup=(("budget", 10),))
    store.put(other.key, {**other.coordinates, "status": "ok"})
    with pytest.raises(
        ValueError, match=r"diabetes/r0/mean with setup \{'budget': 10\}"
    ):
        resume([cell], store)


@pytest.mark.parametrize("jobs", [1, 2])
def test_a_script_cell_and_a_pipeline_cell_go_through_the_same_runner(tmp_path, jobs):
    raw = diabetes()
    settings = parse_settings(
        {**GRID, "datasets": ["diabetes"], "methods": ["random_search"], "budget": 3}
    )
    parameters = {**PARAMETERS, "random_search": fast("random_search")}
    (method_cell, _) = grid_cells(
        settings, {"diabetes": raw}, DATA_PROCESSING, parameters
    )
    tool = tool_cell(task="regression")
    runs = [
        (tool, run_mean, CellLines(tmp_path / "tools.jsonl")),
        (method_cell, run_cell, CellFolder(tmp_path / "cells")),
    ]
    ended = {}
    for cell, run, store in runs:
        ((done, ended[cell.key]),) = run_cells(
            [cell],
            run,
            store,
            frames={"diabetes": raw},
            arguments=(DATA_PROCESSING,),
            jobs=jobs,
            stamp={"nproc": 99},
        )
        record = ended[cell.key]
        assert done == cell and record["status"] == "ok" and record["nproc"] == 99
        assert store.keys() == [cell.key]
        assert store.get(cell.key) == json.loads(json.dumps(record))
        assert resume([cell], store) == ({cell.key: store.get(cell.key)}, [])
    # the pipeline cell's record is the one its node gets running it here
    here = run_cell(method_cell, raw, DATA_PROCESSING)
    assert here["test_loss"] == ended[method_cell.key]["test_loss"]
    assert here["cv_loss_curve"] == ended[method_cell.key]["cv_loss_curve"]


def test_the_runner_stores_failed_cells_only_where_the_store_keeps_them(tmp_path):
    def run(store):
        return list(
            run_cells(
                [tool_cell()],
                run_tool_cell,
                store,
                frames={"diabetes": diabetes()},
                arguments=(DATA_PROCESSING, fit_broken),
            )
        )

    ((_, failed),) = run(CellLines(tmp_path / "cells.jsonl"))
    assert failed["status"] == "failed"
    assert CellLines(tmp_path / "cells.jsonl").keys() == ["diabetes/r0/mean"]
    folder = CellFolder(tmp_path / "cells")
    ((_, failed),) = run(folder)
    assert failed["status"] == "failed" and folder.keys() == []


def test_without_a_store_the_runner_yields_every_cell_in_order():
    cells = [tool_cell(repetition=r) for r in range(3)]
    ended = list(
        run_cells(
            cells, lambda cell, scale: {"value": cell.seed * scale}, arguments=(2,)
        )
    )
    assert [(cell, result["value"]) for cell, result in ended] == [
        (cells[0], 0),
        (cells[1], 2),
        (cells[2], 4),
    ]


# --- the scripts' stored results ------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "count"), [("flaml_comparison", 560), ("multi_fidelity", 432)]
)
def test_the_scripts_stored_cells_are_read_back_under_the_same_keys(name, count):
    records = CellLines(RESULTS / f"{name}.jsonl").records()
    assert len(records) == count
    assert {r["status"] for r in records.values()} == {"ok"}
    for key, stored in records.items():
        cell = ToolCell(
            stored["dataset"],
            stored["repetition"],
            stored["seed"],
            stored["tool"],
            tuple(sorted(stored["setup"].items())),
            time_budget=stored["time_budget"],
            task=stored.get("task"),
            space=stored.get("space"),
        )
        assert cell.key == key
        assert cell.coordinates == {name: stored[name] for name in cell.coordinates}


# --- statistics -----------------------------------------------------------------------


def test_wins_count_ties_half_as_core_comparison_does():
    x, y = np.array([0.1, 0.3, 0.3, 0.5]), np.array([0.2, 0.3, 0.1, 0.6])
    assert wins(x, y) == 2.5 and wins(y, x) == 1.5
    assert wins(pd.Series(x), pd.Series(y)) == 2.5
    assert wins([], []) == 0.0


def test_wilcoxon_p_is_scipy_s_and_nan_without_pairs():
    a, b = np.array([0.1, 0.2, 0.3, 0.4, 0.7]), np.array([0.2, 0.25, 0.5, 0.3, 0.9])
    for alternative in ("less", "greater", "two-sided"):
        expected = stats.wilcoxon(a, b, alternative=alternative).pvalue
        assert wilcoxon_p(a, b, alternative) == pytest.approx(expected)
    assert wilcoxon_p(a, a) == 1.0
    assert math.isnan(wilcoxon_p(np.array([]), np.array([])))
