"""The benchmark pipeline: its wiring, the cell store, and tiny grids run in process.

The grid and its keys are tested in tests/core/test_grid.py, the report in
tests/test_reporting.py.
"""

import ast
import json
import math
import os
import re
from pathlib import Path

import pandas as pd
import pytest
from kedro.config import OmegaConfigLoader
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project

from ensemble_bo import events
from ensemble_bo.benchmarking.store import CellFolder
from ensemble_bo.core.grid import parameter_blocks, parse_settings
from ensemble_bo.core.journal import JournalFolder
from ensemble_bo.core.methods import METHODS
from ensemble_bo.datasets import BenchmarkCellStoreDataset
from ensemble_bo.pipeline_registry import register_pipelines
from ensemble_bo.pipelines.benchmark import nodes
from ensemble_bo.pipelines.benchmark.nodes import load_datasets, run_benchmark
from ensemble_bo.pipelines.benchmark.pipeline import create_pipeline
from ensemble_bo.reporting import benchmark_report

PROJECT = Path(__file__).resolve().parents[2]
BENCHMARK_PACKAGE = PROJECT / "src" / "ensemble_bo" / "pipelines" / "benchmark"
CONF = OmegaConfigLoader(
    str(PROJECT / "conf"), base_env="base", default_run_env="base"
)["parameters"]
PARAMETERS = {name: CONF[name] for name in parameter_blocks()}
GRID = {
    "models": {
        "regression": ["decision_tree_regressor"],
        "classification": ["sego_sklearn"],
    },
    "seed": 3,
    "n_jobs": 1,
}


@pytest.fixture
def cell_events():
    """The CellEnded events published while the test runs."""
    heard = []

    def listener(event):
        if isinstance(event, events.CellEnded):
            heard.append(event)

    events.subscribe(listener)
    yield heard
    events.unsubscribe(listener)


def run(raw, store, benchmark, parameters=None):
    return run_benchmark(
        raw,
        store,
        JournalFolder(store.path.parent / "journals"),
        {**GRID, **benchmark},
        CONF["data_processing"],
        **(parameters or PARAMETERS),
    )


# --- the pipeline -------------------------------------------------------------------


def test_the_pipeline_passes_every_parameter_block_a_method_reads():
    pipeline = create_pipeline()
    inputs = {
        name.removeprefix("params:")
        for name in pipeline.inputs()
        if name.startswith("params:")
    }
    read = {name for method in METHODS.values() for name in method.params}
    # every block but `budget`, which the benchmark sets for all its cells
    assert inputs == (read - {"budget"}) | {
        "voting",
        "final_model",
        "stacking",
        "data_processing",
        "benchmark",
    }


def test_the_benchmark_pipeline_is_registered_and_wired():
    bootstrap_project(PROJECT)
    with KedroSession.create(project_path=PROJECT) as session:
        context = session.load_context()
    catalog = context.catalog  # each read of context.catalog builds a new one
    pipeline = register_pipelines()["benchmark"]
    assert "benchmark" not in {
        n.name for n in register_pipelines()["__default__"].nodes
    }
    for dataset in pipeline.inputs():
        if dataset.startswith("params:"):
            assert dataset.removeprefix("params:") in context.params, dataset
        else:
            assert dataset in catalog, dataset
    raw = catalog.load("raw_datasets")
    assert {"concrete", "boston", "diabetes", "auto_mpg", "wine"} <= set(raw)
    for output in ("benchmark_tables", "benchmark_reports", "benchmark_figures"):
        assert type(catalog.get(output)).__name__ == "PartitionedDataset"
    settings = parse_settings(context.params["benchmark"])
    assert (
        settings.n_jobs >= 1
        and settings.budget == context.params["benchmark"]["budget"]
    )


def test_no_method_name_is_a_string_literal_in_the_benchmark_pipeline():
    for path in BENCHMARK_PACKAGE.glob("*.py"):
        tree = ast.parse(path.read_text())
        literals = {
            node.value
            for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        }
        for name in METHODS:
            word = re.compile(rf"(?<![\w+]){re.escape(name)}(?![\w+])")
            assert not any(word.search(text) for text in literals), (path, name)


# --- errors -------------------------------------------------------------------------


def test_an_unknown_dataset_lists_the_available_ones():
    with pytest.raises(ValueError, match=r"unknown dataset 'nope'.*\['concrete'"):
        load_datasets({"concrete": lambda: None, "wine": lambda: None}, ["nope"])


def test_errors_come_before_any_cell_runs(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(nodes, "run_cell", lambda *a: ran.append(a))
    raw = {"concrete": lambda: pd.read_csv(PROJECT / "data/01_raw/concrete.csv")}
    grid = {"datasets": ["concrete"], "repetitions": 1, "budget": 3}
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        run(raw, CellFolder(tmp_path), {**grid, "methods": ["smbo", "nope"]})
    # a bad block of a later method: refused while the grid expands
    broken = {name: block for name, block in PARAMETERS.items() if name != "ensemble"}
    with pytest.raises(ValueError, match="reads params:ensemble"):
        run(
            raw,
            CellFolder(tmp_path),
            {**grid, "methods": ["smbo", "segor"]},
            broken,
        )
    assert ran == []


# --- store --------------------------------------------------------------------------


def test_the_store_round_trips_records_and_skips_temporary_files(tmp_path):
    dataset = BenchmarkCellStoreDataset(path=str(tmp_path / "cells"))
    store = dataset.load()
    assert not store.has("a__b") and store.keys() == []
    record = {"key": "a__b", "test_loss": 0.1 + 0.2, "curve": [1.0, None, math.nan]}
    store.put("a__b", record)
    (tmp_path / "cells" / ".a__c.123.tmp").write_text("{half a rec")
    again = dataset.load()
    assert again.has("a__b") and again.keys() == ["a__b"]
    loaded = again.get("a__b")
    assert loaded["test_loss"] == 0.1 + 0.2  # floats round-trip exactly
    assert loaded["curve"][:2] == [1.0, None] and math.isnan(loaded["curve"][2])
    with pytest.raises(KeyError, match="no finished cell 'zz'"):
        again.get("zz")
    with pytest.raises(ValueError, match="not a safe file name"):
        store.put("../escape", record)


def test_a_write_goes_through_a_temporary_file_and_os_replace(tmp_path, monkeypatch):
    store = CellFolder(tmp_path)
    store.put("cell", {"v": 1})
    replaced = []

    def failing_replace(source, target):
        replaced.append((Path(source).name, Path(target).name))
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", failing_replace)
    with pytest.raises(OSError, match="disk full"):
        store.put("cell", {"v": 2})
    source, target = replaced[0]
    assert source.startswith(".cell.") and source.endswith(".tmp")
    assert target == "cell.json"
    # the old record is intact and the temporary file is gone
    assert json.loads((tmp_path / "cell.json").read_text()) == {"v": 1}
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cell.json"]


# --- a tiny grid, in process ----------------------------------------------------------


def fast(name):
    block = dict(CONF[name])
    block["time_limit"] = None
    if block["optimizer"]["kind"] == "gp":
        block["optimizer"] = {**block["optimizer"], "n_initial": 3}
    return block


def test_a_tiny_grid_runs_stores_and_reuses_its_cells(tmp_path, cell_events, caplog):
    raw = {
        "diabetes": lambda: pd.read_csv(PROJECT / "data/01_raw/diabetes.csv"),
        "never_loaded": lambda: pytest.fail("a dataset outside the grid was loaded"),
    }
    parameters = {**PARAMETERS, "smbo": fast("smbo"), "ers": fast("ers")}
    benchmark = {
        "datasets": ["diabetes"],
        "methods": ["smbo", "smbo_posthoc", "ers"],
        "repetitions": 1,
        "budget": 5,
    }
    store = CellFolder(tmp_path)
    with caplog.at_level("INFO", logger=nodes.__name__):
        records = run(raw, store, benchmark, parameters)
    assert [r["key"] for r in records] == sorted(r["key"] for r in records)
    records = sorted(records, key=lambda r: r["method"])
    assert [r["method"] for r in records] == ["ers", "smbo", "smbo_posthoc"]
    assert sorted(store.keys()) == sorted(r["key"] for r in records)
    for r in records:
        assert r["status"] == "ok"
        assert r["test_loss"] == r["test_metrics"]["test_mse_ensemble"]
        assert len(r["test_sample_losses"]) == len(records[0]["test_sample_losses"])
        assert len(r["cv_loss_curve"]) == 5 and r["cv_loss"] == r["cv_loss_curve"][-1]
        assert r["wall_seconds"] > 0 and r["trials_failed"] == 0
        assert r["ensemble_mutual_information"] >= 0.0
    smbo, posthoc = records[1], records[2]
    assert smbo["ensemble_size"] == 1
    # the same search, then the selection: its CV loss is no worse than SMBO's
    assert posthoc["cv_loss_curve"][:4] == smbo["cv_loss_curve"][:4]
    assert posthoc["cv_loss"] <= smbo["cv_loss"]
    assert sorted((e.record["key"], e.reused) for e in cell_events) == [
        (r["key"], False) for r in sorted(records, key=lambda r: r["key"])
    ]
    # one console line per cell
    for r in records:
        assert any(r["key"] in line.getMessage() for line in caplog.records)

    cell_events.clear()
    again = run(raw, store, benchmark, parameters)
    assert sorted(again, key=lambda r: r["method"]) == records
    assert sorted((e.record["key"], e.reused) for e in cell_events) == [
        (r["key"], True) for r in sorted(records, key=lambda r: r["key"])
    ]
    assert [e.record for e in cell_events] == sorted(again, key=lambda r: r["key"])


def test_a_failed_cell_is_recorded_not_stored_and_the_grid_goes_on(
    tmp_path, cell_events, caplog
):
    raw = {"diabetes": lambda: pd.read_csv(PROJECT / "data/01_raw/diabetes.csv")}
    broken = {**fast("random_search"), "optimizer": {"kind": "bayesian"}}
    parameters = {**PARAMETERS, "smbo": fast("smbo"), "random_search": broken}
    benchmark = {
        "datasets": ["diabetes"],
        "methods": ["random_search", "smbo"],
        "repetitions": 1,
        "budget": 4,
    }
    store = CellFolder(tmp_path)
    with caplog.at_level("INFO", logger=nodes.__name__):
        records = run(raw, store, benchmark, parameters)
    by_method = {r["method"]: r for r in records}
    failed = by_method["random_search"]
    assert failed["status"] == "failed" and "bayesian" in failed["error"]
    assert by_method["smbo"]["status"] == "ok"
    # only the finished cell is stored, so a rerun tries the failed one again
    assert store.keys() == [by_method["smbo"]["key"]]
    assert any(
        r.levelname == "WARNING" and failed["key"] in r.getMessage()
        for r in caplog.records
    )
    assert {e.record["key"]: e.record["status"] for e in cell_events} == {
        failed["key"]: "failed",
        by_method["smbo"]["key"]: "ok",
    }
    tables, reports, _ = benchmark_report(records)
    report = reports["decision_tree_regressor/report"]
    assert f"- {failed['key']}: " in report and "Failed cells" in report
    cells = tables["cells"].set_index("method")
    assert cells.loc["random_search", "status"] == "failed"
    assert list(tables["decision_tree_regressor/test_loss"].columns) == [
        "dataset",
        "smbo",
    ]
