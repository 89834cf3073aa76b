"""The benchmark's pure parts: grid, cell keys, store, report, errors; one tiny grid run."""

import json
import math
import os
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from kedro.config import OmegaConfigLoader
from kedro.framework.session import KedroSession
from kedro.framework.startup import bootstrap_project
from scipy import stats

from ensemble_bo.datasets import BenchmarkCellStore, BenchmarkCellStoreDataset
from ensemble_bo.pipeline_registry import register_pipelines
from ensemble_bo.pipelines.benchmark import nodes
from ensemble_bo.pipelines.benchmark.nodes import (
    METHODS,
    benchmark_report,
    expand_grid,
    load_datasets,
    loss_on_test_split,
    parse_method,
    parse_settings,
    rank_curves,
    run_benchmark,
)
from ensemble_bo.pipelines.benchmark.pipeline import METHOD_PARAMETERS

PROJECT = Path(__file__).resolve().parents[2]
CONF = OmegaConfigLoader(
    str(PROJECT / "conf"), base_env="base", default_run_env="base"
)["parameters"]
METHOD_PARAMS = {name: CONF[name] for name in METHOD_PARAMETERS}
GRID = {
    "datasets": ["concrete", "wine"],
    "models": {
        "regression": ["decision_tree_regressor"],
        "classification": ["sego_sklearn"],
    },
    "methods": ["smbo", "segor:f-m", "sego"],
    "repetitions": 2,
    "budget": 8,
    "seed": 3,
    "n_jobs": 1,
}
TASKS = {"concrete": "regression", "wine": "classification"}
SHA = {"concrete": "aaa", "wine": "bbb"}


def grid(benchmark=None, method_params=None, data_processing=None, sha=None):
    return expand_grid(
        parse_settings({**GRID, **(benchmark or {})}),
        TASKS,
        sha or SHA,
        data_processing or CONF["data_processing"],
        CONF["models"],
        method_params or METHOD_PARAMS,
    )


# --- grid -------------------------------------------------------------------------


def test_the_grid_applies_the_task_rules_and_seeds_repetitions_alike():
    cells = grid()
    coordinates = [(c.dataset, c.model, c.method, c.repetition) for c in cells]
    # segor on regression only, sego on classification only, smbo on both
    assert coordinates == [
        ("concrete", "decision_tree_regressor", "smbo", 0),
        ("concrete", "decision_tree_regressor", "smbo", 1),
        ("concrete", "decision_tree_regressor", "segor:f-m", 0),
        ("concrete", "decision_tree_regressor", "segor:f-m", 1),
        ("wine", "sego_sklearn", "smbo", 0),
        ("wine", "sego_sklearn", "smbo", 1),
        ("wine", "sego_sklearn", "sego", 0),
        ("wine", "sego_sklearn", "sego", 1),
    ]
    # repetition r: seed + r, the same for every method (same split and folds)
    assert {(c.repetition, c.seed) for c in cells} == {(0, 3), (1, 4)}
    assert all(c.budget == 8 for c in cells)
    segor = next(c for c in cells if c.method == "segor:f-m")
    assert segor.params["segor"]["model"] == "decision_tree_regressor"
    assert segor.params["ensemble"]["variant"] == "f-m"
    # the optimizer settings are the method's own
    assert segor.params["segor"]["optimizer"] == CONF["segor"]["optimizer"]
    smbo_wine = next(c for c in cells if c.dataset == "wine" and c.method == "smbo")
    assert smbo_wine.params["smbo"]["model"] == "sego_sklearn"
    assert smbo_wine.params["voting"] == CONF["voting"]


def test_a_benchmark_time_limit_applies_to_every_method_and_changes_the_keys():
    default = grid()
    assert all(c.params[c.method.split(":")[0]]["time_limit"] == 600 for c in default)
    limited = grid({"time_limit": 30})
    assert {c.params[c.method.split(":")[0]]["time_limit"] for c in limited} == {30.0}
    assert not {c.key for c in default} & {c.key for c in limited}
    for bad in (0, -5, "60", True):
        with pytest.raises(ValueError, match="benchmark.time_limit must be a positive"):
            grid({"time_limit": bad})


def test_a_segor_variant_overrides_only_the_variant():
    cells = grid({"methods": ["segor:g-h"], "datasets": ["concrete"]})
    assert {c.params["ensemble"]["variant"] for c in cells} == {"g-h"}
    assert cells[0].params["ensemble"]["size"] == CONF["ensemble"]["size"]


def test_the_pipeline_passes_every_parameter_block_a_method_reads():
    read = {name for method in METHODS.values() for name in method.params}
    assert read | set(nodes.REFIT_PARAMS) == set(METHOD_PARAMETERS)


def test_the_benchmark_pipeline_is_registered_and_wired():
    bootstrap_project(PROJECT)
    with KedroSession.create(project_path=PROJECT) as session:
        context = session.load_context()
    pipeline = register_pipelines()["benchmark"]
    assert "benchmark" not in {
        n.name for n in register_pipelines()["__default__"].nodes
    }
    for dataset in pipeline.inputs():
        if dataset.startswith("params:"):
            assert dataset.removeprefix("params:") in context.params, dataset
        else:
            assert dataset in context.catalog, dataset
    raw = context.catalog.load("raw_datasets")
    assert {"concrete", "boston", "diabetes", "auto_mpg", "wine"} <= set(raw)
    for output in ("benchmark_tables", "benchmark_reports", "benchmark_figures"):
        assert type(context.catalog.get(output)).__name__ == "PartitionedDataset"
    # the default grid expands without error
    settings = parse_settings(context.params["benchmark"])
    assert (
        settings.n_jobs >= 1
        and settings.budget == context.params["benchmark"]["budget"]
    )


def test_method_names_and_variants_parse():
    assert parse_method("segor:d-t").name == "segor"
    assert parse_method("segor:d-t").variant == "d-t"
    assert parse_method("smbo+posthoc").variant is None
    assert set(METHODS) >= {"smbo", "smbo+posthoc", "esmbo", "ers", "segor", "sego"}


# --- cell keys ----------------------------------------------------------------------


def test_cell_keys_are_stable_unique_and_file_safe():
    first, second = grid(), grid()
    assert [c.key for c in first] == [c.key for c in second]
    assert len({c.key for c in first}) == len(first)
    assert first[2].key.startswith(
        "concrete__decision_tree_regressor__segor=f-m__r0__s3__b8__"
    )
    store = BenchmarkCellStore("/nonexistent")
    for cell in first:
        store._file(cell.key)  # a safe file name, or it raises


@pytest.mark.parametrize(
    "change",
    [
        {"method_params": {**METHOD_PARAMS, "smbo": {**CONF["smbo"], "loss": "huber"}}},
        {
            "method_params": {
                **METHOD_PARAMS,
                "smbo": {
                    **CONF["smbo"],
                    "optimizer": {**CONF["smbo"]["optimizer"], "n_initial": 3},
                },
            }
        },
        {"data_processing": {**CONF["data_processing"], "n_folds": 3}},
        {"sha": {**SHA, "concrete": "changed"}},
        {"benchmark": {"budget": 9}},
        {"benchmark": {"seed": 4}},
    ],
)
def test_a_changed_parameter_changes_the_key(change):
    before = {
        (c.dataset, c.method, c.repetition): c.key
        for c in grid()
        if c.dataset == "concrete"
    }
    after = {
        (c.dataset, c.method, c.repetition): c.key
        for c in grid(**change)
        if c.dataset == "concrete"
    }
    assert before[("concrete", "smbo", 0)] != after[("concrete", "smbo", 0)]


def test_a_parameter_of_another_method_leaves_the_key():
    changed = {**METHOD_PARAMS, "esmbo": {**CONF["esmbo"], "n_replicas": 3}}
    assert [c.key for c in grid()] == [c.key for c in grid(method_params=changed)]


# --- errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("benchmark", "message"),
    [
        ({"methods": ["smbo", "bogus"]}, "unknown method 'bogus'.*known methods"),
        ({"methods": ["smbo:f-m"]}, "'smbo' takes no ':<variant>'"),
        ({"methods": ["segor:"]}, "empty variant"),
        ({"methods": ["segor:x-m"]}, "unknown ensemble size method 'x'"),
        ({"methods": ["smbo", "smbo"]}, r"\['smbo'\] more than once"),
        ({"methods": []}, "benchmark.methods is empty"),
        ({"repetitions": 0}, "repetitions must be an integer >= 1"),
        ({"budget": "many"}, "budget must be an integer"),
        (
            {"models": {"regression": ["forest"]}},
            "unknown model space 'forest'; available under `models`",
        ),
        (
            {"models": {"regression": ["sego_svm"], "classification": ["sego_svm"]}},
            "'sego_svm' is a classification model space",
        ),
        (
            {"models": {"regression": ["decision_tree_regressor"]}},
            "'wine' is a classification task but benchmark.models.classification",
        ),
        ({"models": {"clustering": []}}, "must map a task"),
    ],
)
def test_bad_grids_are_refused_naming_the_value(benchmark, message):
    with pytest.raises(ValueError, match=message):
        grid(benchmark)


def test_an_unknown_dataset_lists_the_available_ones():
    with pytest.raises(ValueError, match=r"unknown dataset 'nope'.*\['concrete'"):
        load_datasets({"concrete": lambda: None, "wine": lambda: None}, ["nope"])


def test_errors_come_before_any_cell_runs(tmp_path, monkeypatch):
    ran = []
    monkeypatch.setattr(nodes, "run_cell", lambda *a: ran.append(a))
    raw = {"concrete": lambda: pd.read_csv(PROJECT / "data/01_raw/concrete.csv")}
    with pytest.raises(ValueError, match="unknown method 'nope'"):
        run_benchmark(
            raw,
            BenchmarkCellStore(tmp_path),
            {**GRID, "datasets": ["concrete"], "methods": ["smbo", "nope"]},
            CONF["data_processing"],
            CONF["models"],
            CONF["default_models"],
            **METHOD_PARAMS,
        )
    assert ran == []


def test_test_loss_is_the_task_s_metric():
    metrics = {"test_mse_ensemble": 0.3, "test_error_ensemble": 0.1}
    assert loss_on_test_split(metrics, "regression") == 0.3
    assert loss_on_test_split(metrics, "classification") == 0.1


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
    store = BenchmarkCellStore(tmp_path)
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


# --- report -------------------------------------------------------------------------


def record(dataset, method, repetition, loss, curve, model="space_a"):
    return {
        "key": f"{dataset}__{model}__{method}__r{repetition}",
        "dataset": dataset,
        "task": "regression",
        "model": model,
        "method": method,
        "repetition": repetition,
        "seed": repetition,
        "budget": len(curve),
        "test_loss": loss,
        "cv_loss": curve[-1],
        "cv_loss_curve": curve,
        "ensemble_size": 1,
        "ensemble_members_distinct": 1,
        "ensemble_mutual_information": 0.0,
        "trials_failed": 0,
        "wall_seconds": 1.0 + repetition,
    }


def test_rank_curves_average_the_per_iteration_ranks():
    records = [
        # dataset d1: A better at iterations 1-2, B at 3
        record("d1", "A", 0, 0.1, [1.0, 0.5, 0.5]),
        record("d1", "B", 0, 0.2, [2.0, 0.6, 0.4]),
        # dataset d2: tie at 1, B better after; A's curve is one short (padded)
        record("d2", "A", 0, 0.3, [1.0, 0.9]),
        record("d2", "B", 0, 0.1, [1.0, 0.2, 0.1]),
    ]
    curves = rank_curves(records)
    assert list(curves.columns) == ["A", "B"]
    assert list(curves.index) == [1, 2, 3]
    np.testing.assert_allclose(curves["A"], [(1 + 1.5) / 2, (1 + 2) / 2, (2 + 2) / 2])
    np.testing.assert_allclose(curves["A"] + curves["B"], 3.0)


def test_no_model_yet_ranks_last():
    curves = rank_curves(
        [record("d", "A", 0, 0.1, [None, 0.5]), record("d", "B", 0, 0.2, [0.9, 0.6])]
    )
    assert curves.loc[1, "A"] == 2.0 and curves.loc[2, "A"] == 1.0


def hand_records():
    losses = {  # dataset -> method -> losses of repetitions 0, 1
        "d1": {"A": (0.1, 0.3), "B": (0.2, 0.2), "C": (0.5, 0.5)},
        "d2": {"A": (0.4, 0.4), "B": (0.1, 0.1), "C": (0.6, 0.8)},
        "d3": {"A": (0.1, 0.1), "B": (0.3, 0.3), "C": (0.2, 0.2)},
    }
    return [
        record(dataset, method, repetition, loss, [1.0, loss])
        for dataset, methods in losses.items()
        for method, pair in methods.items()
        for repetition, loss in enumerate(pair)
    ]


def test_the_report_tables_from_hand_made_records():
    tables, reports, figures = benchmark_report(hand_records())
    losses = tables["space_a/test_loss"].set_index("dataset")
    assert losses.loc["d1", "A"] == pytest.approx(0.2)
    assert losses.loc["d2", "C"] == pytest.approx(0.7)
    comparison = tables["space_a/comparison"].set_index("method")
    # mean losses: d1 A 0.2 = B 0.2 < C; d2 B < A < C; d3 A < C < B
    assert comparison["E[rank]"].to_dict() == pytest.approx(
        {"A": (1.5 + 2 + 1) / 3, "B": (1.5 + 1 + 3) / 3, "C": (3 + 3 + 2) / 3}
    )
    assert list(comparison.index) == ["A", "B", "C"]  # sorted by expected rank
    assert comparison.loc["A", "C"] == pytest.approx(1.0)
    wilcoxon = tables["space_a/wilcoxon"].set_index("method")
    # A beats C on all 3 datasets: exact one-tailed p = 1/2^3
    assert wilcoxon.loc["A", "C"] == pytest.approx(0.125)
    assert list(wilcoxon.index) == ["A", "B", "C"]
    report = reports["space_a/report"]
    assert "Friedman chi-square" in report and "CD = " in report
    assert "| A | - |" in report
    assert set(figures) == {"space_a/critical_difference", "space_a/convergence"}
    assert list(tables["cells"]["key"]) == sorted(r["key"] for r in hand_records())
    assert "wall_seconds" not in tables["cells"]


def test_the_report_does_not_depend_on_record_order_or_wall_time():
    records = hand_records()
    shuffled = [dict(r, wall_seconds=99.0) for r in reversed(records)]
    first, second = benchmark_report(records), benchmark_report(shuffled)
    assert first[1] == second[1]
    for name in first[0]:
        assert first[0][name].to_csv() == second[0][name].to_csv()


def test_one_method_or_one_dataset_does_not_crash():
    one_method = [r for r in hand_records() if r["method"] == "A"]
    tables, reports, figures = benchmark_report(one_method)
    assert "Skipped: needs at least 2 methods" in reports["space_a/report"]
    assert "space_a/critical_difference" not in figures
    one_dataset = [r for r in hand_records() if r["dataset"] == "d1"]
    tables, reports, _ = benchmark_report(one_dataset)
    assert (
        "Friedman test skipped: needs at least 3 methods and 2 datasets"
        in (reports["space_a/report"])
    )
    assert "space_a/comparison" in tables


def test_each_model_space_gets_its_own_report():
    records = hand_records() + [
        dict(r, model="space_b", key=r["key"] + "b") for r in hand_records()
    ]
    _, reports, _ = benchmark_report(records)
    assert set(reports) == {"space_a/report", "space_b/report"}


# --- a tiny grid, in process ----------------------------------------------------------


def fast(name):
    block = dict(CONF[name])
    block["time_limit"] = None
    if block["optimizer"]["kind"] == "gp":
        block["optimizer"] = {**block["optimizer"], "n_initial": 3}
    return block


def test_a_tiny_grid_runs_stores_and_reuses_its_cells(tmp_path, caplog):
    raw = {
        "diabetes": lambda: pd.read_csv(PROJECT / "data/01_raw/diabetes.csv"),
        "never_loaded": lambda: pytest.fail("a dataset outside the grid was loaded"),
    }
    params = {**METHOD_PARAMS, "smbo": fast("smbo"), "ers": fast("ers")}
    benchmark = {
        **GRID,
        "datasets": ["diabetes"],
        "methods": ["smbo", "smbo+posthoc", "ers"],
        "repetitions": 1,
        "budget": 5,
    }
    store = BenchmarkCellStore(tmp_path)
    args = (
        raw,
        store,
        benchmark,
        CONF["data_processing"],
        CONF["models"],
        CONF["default_models"],
    )
    with caplog.at_level("INFO", logger="ensemble_bo.benchmark"):
        records = run_benchmark(*args, **params)
    assert [r["key"] for r in records] == sorted(r["key"] for r in records)
    records = sorted(records, key=lambda r: r["method"])
    assert [r["method"] for r in records] == ["ers", "smbo", "smbo+posthoc"]
    assert len(store.keys()) == 3
    for r in records:
        assert r["test_loss"] == r["test_metrics"]["test_mse_ensemble"]
        assert len(r["cv_loss_curve"]) == 5 and r["cv_loss"] == r["cv_loss_curve"][-1]
        assert r["wall_seconds"] > 0 and r["trials_failed"] == 0
    smbo, posthoc = records[1], records[2]
    assert smbo["ensemble_size"] == 1
    # the same search, then the selection: its CV loss is no worse than SMBO's
    assert posthoc["cv_loss_curve"][:4] == smbo["cv_loss_curve"][:4]
    assert posthoc["cv_loss"] <= smbo["cv_loss"]
    announced = [rec for rec in caplog.records if hasattr(rec, "cell")]
    assert len(announced) == 3 and not any(rec.reused for rec in announced)

    caplog.clear()
    with caplog.at_level("INFO", logger="ensemble_bo.benchmark"):
        again = run_benchmark(*args, **params)
    assert sorted(again, key=lambda r: r["method"]) == records
    announced = [rec for rec in caplog.records if hasattr(rec, "cell")]
    assert len(announced) == 3 and all(rec.reused for rec in announced)


def test_a_failed_cell_is_recorded_not_stored_and_the_grid_goes_on(tmp_path, caplog):
    raw = {"diabetes": lambda: pd.read_csv(PROJECT / "data/01_raw/diabetes.csv")}
    broken = {**fast("random_search"), "optimizer": {"kind": "bayesian"}}
    params = {**METHOD_PARAMS, "smbo": fast("smbo"), "random_search": broken}
    benchmark = {
        **GRID,
        "datasets": ["diabetes"],
        "methods": ["random_search", "smbo"],
        "repetitions": 1,
        "budget": 4,
    }
    store = BenchmarkCellStore(tmp_path)
    with caplog.at_level("INFO", logger="ensemble_bo.benchmark"):
        records = run_benchmark(
            raw,
            store,
            benchmark,
            CONF["data_processing"],
            CONF["models"],
            CONF["default_models"],
            **params,
        )
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
    tables, reports, _ = benchmark_report(records)
    report = reports["decision_tree_regressor/report"]
    assert f"- {failed['key']}: " in report and "Failed cells" in report
    cells = tables["cells"].set_index("method")
    assert cells.loc["random_search", "status"] == "failed"
    assert list(tables["decision_tree_regressor/test_loss"].columns) == [
        "dataset",
        "smbo",
    ]


def test_pb_probabilities_come_from_the_paired_test_outcomes():
    def cell(method, repetition, losses, task="regression"):
        return {
            "dataset": "d",
            "method": method,
            "repetition": repetition,
            "task": task,
            "test_sample_losses": losses,
        }

    regression = [
        cell("A", 0, [1.0, 2.0, 4.0]),
        cell("A", 1, [3.0, 1.0]),
        cell("B", 1, [5.0, 1.0]),
        cell("B", 0, [2.0, 2.0, 6.0]),
    ]
    # repetition 0: d = B - A = [1, 0, 2], mean 1, sd 1, n = 3 -> t.cdf(sqrt(3), 2);
    # repetition 1: d = [2, 0], mean 1, sd sqrt(2), n = 2 -> t.cdf(1, 1) = 0.75
    expected = (stats.t.cdf(np.sqrt(3), df=2) + 0.75) / 2
    probabilities = nodes.pairwise_test_probabilities(regression, ["d"], ["A", "B"])
    assert probabilities == {("A", "B"): [pytest.approx(expected)]}

    classification = [
        cell("A", 0, [0.0, 1.0, 0.0], "classification"),
        cell("B", 0, [1.0, 1.0, 0.0], "classification"),
    ]
    # A alone right once, B alone right never: Pr(Beta(2, 1) > 1/2) = 0.75
    probabilities = nodes.pairwise_test_probabilities(classification, ["d"], ["A", "B"])
    assert probabilities == {("A", "B"): [pytest.approx(0.75)]}

    del regression[0]["test_sample_losses"]
    assert nodes.pairwise_test_probabilities(regression, ["d"], ["A", "B"]) is None
