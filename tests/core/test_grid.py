"""The benchmark's grid: settings, task rules, cell settings, keys, errors, one cell's run."""

import copy
from pathlib import Path

import pandas as pd
import pytest
from kedro.config import OmegaConfigLoader

from ensemble_bo.benchmarking.store import CellFolder
from ensemble_bo.core.grid import (
    REFIT_PARAMS,
    cell_fingerprint,
    cell_settings,
    expand_grid,
    grid_cells,
    loss_on_test_split,
    parameter_blocks,
    parse_settings,
    repetition_seed,
    run_cell,
)
from ensemble_bo.core.methods import METHODS, parse_method

PROJECT = Path(__file__).resolve().parents[2]
CONF = OmegaConfigLoader(
    str(PROJECT / "conf"), base_env="base", default_run_env="base"
)["parameters"]
PARAMETERS = {name: CONF[name] for name in parameter_blocks()}
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


ROWS = {"concrete": 1030, "wine": 178}


def grid(benchmark=None, parameters=None, data_processing=None, sha=None, rows=None):
    return expand_grid(
        parse_settings({**GRID, **(benchmark or {})}),
        TASKS,
        sha or SHA,
        data_processing or CONF["data_processing"],
        parameters or PARAMETERS,
        rows or ROWS,
    )


def test_only_data_the_search_may_sample_keys_its_large_data_start():
    # sego_sklearn has a large-data start; wine past max_search_rows rows
    large = {**ROWS, "wine": PARAMETERS["max_search_rows"] + 1}
    before = {cell.key for cell in grid()}
    after = {cell.key for cell in grid(rows=large)}
    changed = {key.split("__")[0] for key in before ^ after}
    assert changed == {"wine"}
    assert {key.split("__")[0] for key in before - after} == {"wine"}


def search_block(cell):
    return cell.settings[parse_method(cell.method)[0].search_params]


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
    assert repetition_seed(3, 1) == 4
    assert all(c.budget == 8 and c.settings["budget"] == 8 for c in cells)
    segor = next(c for c in cells if c.method == "segor:f-m")
    assert segor.settings["segor"]["model"] == "decision_tree_regressor"
    assert segor.settings["ensemble"]["variant"] == "f-m"
    # the optimizer settings are the method's own
    assert segor.settings["segor"]["optimizer"] == CONF["segor"]["optimizer"]
    smbo_wine = next(c for c in cells if c.dataset == "wine" and c.method == "smbo")
    assert smbo_wine.settings["smbo"]["model"] == "sego_sklearn"
    assert smbo_wine.settings["voting"] == CONF["voting"]
    # a cell reads its method's blocks and the refit's, its space alone
    assert set(smbo_wine.settings) == {*METHODS["smbo"].params, *REFIT_PARAMS}
    assert smbo_wine.settings["models"] == {
        "sego_sklearn": CONF["models"]["sego_sklearn"]
    }


def test_a_cell_s_settings_leave_the_project_s_blocks_unchanged():
    before = copy.deepcopy(PARAMETERS)
    settings = cell_settings("segor:g-h", PARAMETERS, "decision_tree_regressor", 5, 30)
    assert settings["segor"]["time_limit"] == 30 and settings["budget"] == 5
    assert settings["ensemble"]["variant"] == "g-h"
    assert PARAMETERS == before


def test_a_missing_block_is_named():
    parameters = {k: v for k, v in PARAMETERS.items() if k != "posthoc"}
    with pytest.raises(ValueError, match=r"'smbo_posthoc' reads params:posthoc"):
        cell_settings("smbo_posthoc", parameters, "decision_tree_regressor", 5)
    parameters = {k: v for k, v in PARAMETERS.items() if k != "voting"}
    with pytest.raises(ValueError, match="'smbo' reads params:voting"):
        cell_settings("smbo", parameters, "decision_tree_regressor", 5)


def test_a_benchmark_time_limit_applies_to_every_method_and_changes_the_keys():
    default = grid()
    assert {search_block(c)["time_limit"] for c in default} == {600}
    limited = grid({"time_limit": 30})
    assert {search_block(c)["time_limit"] for c in limited} == {30.0}
    assert not {c.key for c in default} & {c.key for c in limited}
    for bad in (0, -5, "60", True):
        with pytest.raises(ValueError, match="benchmark.time_limit must be a positive"):
            grid({"time_limit": bad})


def test_a_segor_variant_overrides_only_the_variant():
    cells = grid({"methods": ["segor:g-h"], "datasets": ["concrete"]})
    assert {c.settings["ensemble"]["variant"] for c in cells} == {"g-h"}
    assert cells[0].settings["ensemble"]["size"] == CONF["ensemble"]["size"]


def test_the_parameter_blocks_are_every_block_a_method_reads():
    read = {name for method in METHODS.values() for name in method.params}
    # the benchmark sets the budget itself
    assert set(parameter_blocks()) == (read - {"budget"}) | set(REFIT_PARAMS)


def test_every_registered_method_gets_a_cell_on_its_tasks():
    every = {"methods": sorted(METHODS), "repetitions": 1}
    cells = grid(every)
    for name, method in METHODS.items():
        tasks = {c.task for c in cells if c.method == name}
        assert tasks == set(method.tasks) & set(TASKS.values()), name


# --- cell keys ----------------------------------------------------------------------


def test_cell_keys_are_stable_unique_and_file_safe():
    first, second = grid(), grid()
    assert [c.key for c in first] == [c.key for c in second]
    assert len({c.key for c in first}) == len(first)
    assert first[2].key.startswith(
        "concrete__decision_tree_regressor__segor=f-m__r0__s3__b8__"
    )
    assert len(first[2].key.rsplit("__", 1)[1]) == 12
    store = CellFolder("/nonexistent")
    for cell in first:
        store._file(cell.key)  # a safe file name, or it raises


@pytest.mark.parametrize(
    "change",
    [
        {"parameters": {**PARAMETERS, "smbo": {**CONF["smbo"], "loss": "huber"}}},
        {
            "parameters": {
                **PARAMETERS,
                "smbo": {
                    **CONF["smbo"],
                    "optimizer": {**CONF["smbo"]["optimizer"], "n_initial": 3},
                },
            }
        },
        {"parameters": {**PARAMETERS, "voting": "soft"}},
        {"parameters": {**PARAMETERS, "stacking": True}},
        # a time budget changes where each search stops
        {"parameters": {**PARAMETERS, "time_budget": 30}},
        {
            "parameters": {
                **PARAMETERS,
                "models": {
                    **CONF["models"],
                    "decision_tree_regressor": {
                        **CONF["models"]["decision_tree_regressor"],
                        "extra": {"type": "float", "low": 0.0, "high": 1.0},
                    },
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
    def keys(cells):
        return {
            (c.method, c.repetition): c.key for c in cells if c.dataset == "concrete"
        }

    assert keys(grid())[("smbo", 0)] != keys(grid(**change))[("smbo", 0)]


@pytest.mark.parametrize(
    "change",
    [
        {"esmbo": {**CONF["esmbo"], "n_replicas": 3}},
        {"budget": 999},  # the project's budget: the benchmark has its own
        {"default_models": {**CONF["default_models"], "regression": "svr"}},
        {"models": {**CONF["models"], "another": {}}},
    ],
)
def test_a_parameter_the_cell_does_not_read_leaves_the_key(change):
    assert [c.key for c in grid()] == [
        c.key for c in grid(parameters={**PARAMETERS, **change})
    ]


def test_stacking_off_leaves_the_keys_of_cells_run_before_it_existed():
    settings = cell_settings("segor", CONF, "decision_tree_regressor", 5, None)
    assert settings["stacking"] is False
    before = {name: value for name, value in settings.items() if name != "stacking"}
    fingerprint = cell_fingerprint(settings, "decision_tree_regressor", {}, "sha")
    assert fingerprint == cell_fingerprint(before, "decision_tree_regressor", {}, "sha")


# --- errors -------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("benchmark", "message"),
    [
        (
            {"methods": ["smbo", "bogus"]},
            "benchmark.methods: unknown method 'bogus'.*known methods",
        ),
        ({"methods": ["smbo:f-m"]}, "'smbo' takes no ':<variant>'"),
        ({"methods": ["segor:"]}, "'segor:' has an empty variant"),
        ({"methods": ["segor:x-m"]}, "unknown ensemble size method 'x'"),
        ({"methods": ["smbo", "smbo"]}, r"\['smbo'\] more than once"),
        ({"methods": []}, "benchmark.methods is empty"),
        ({"datasets": "concrete concrete"}, r"datasets lists \['concrete'\]"),
        ({"methods": "smbo bogus"}, "unknown method 'bogus'"),  # a string is split
        ({"repetitions": 0}, "repetitions must be an integer >= 1, got 0"),
        ({"budget": "many"}, "budget must be an integer >= 1, got 'many'"),
        ({"n_jobs": 0}, "n_jobs must be a non-zero integer, got 0"),
        ({"seed": -1}, "seed must be an integer >= 0, got -1"),
        (
            {"models": {"regression": ["forest"]}},
            "unknown model 'forest'; available under `models`",
        ),
        (
            {"models": {"regression": ["sego_svm"], "classification": ["sego_svm"]}},
            "'sego_svm' is a classification model",
        ),
        (
            {"models": {"regression": ["decision_tree_regressor"]}},
            "'wine' is a classification task but benchmark.models.classification",
        ),
        ({"models": {"clustering": []}}, "must map a task.*'clustering'"),
        (
            {"methods": ["sego"], "datasets": ["concrete"]},
            "the benchmark grid is empty",
        ),
    ],
)
def test_bad_grids_are_refused_naming_the_value(benchmark, message):
    with pytest.raises(ValueError, match=message):
        grid(benchmark)


def test_test_loss_is_the_task_s_metric():
    metrics = {"test_mse_ensemble": 0.3, "test_error_ensemble": 0.1}
    assert loss_on_test_split(metrics, "regression") == 0.3
    assert loss_on_test_split(metrics, "classification") == 0.1


# --- one cell -----------------------------------------------------------------------


def fast(name):
    block = dict(CONF[name])
    block["time_limit"] = None
    return block


def test_a_cell_runs_to_its_record_and_a_broken_one_fails_alone():
    frame = pd.read_csv(PROJECT / "data/01_raw/diabetes.csv")
    settings = parse_settings(
        {**GRID, "datasets": ["diabetes"], "methods": ["random_search"], "budget": 3}
    )
    parameters = {**PARAMETERS, "random_search": fast("random_search")}
    (cell, _) = grid_cells(
        settings, {"diabetes": frame}, CONF["data_processing"], parameters
    )
    record = run_cell(cell, frame, CONF["data_processing"])
    assert record["status"] == "ok" and record["key"] == cell.key
    assert record["test_loss"] == record["test_metrics"]["test_mse_ensemble"]
    assert record["test_loss"] == pytest.approx(
        sum(record["test_sample_losses"]) / len(record["test_sample_losses"])
    )
    curve = record["cv_loss_curve"]
    assert len(curve) == 3 and record["cv_loss"] == curve[-1] == min(curve)
    # one member (the single best): no pair, no mutual information
    assert record["ensemble_mutual_information"] == 0.0
    assert record["ensemble_size"] == 1 and record["wall_seconds"] > 0

    broken = {**fast("random_search"), "optimizer": {"kind": "bayesian"}}
    (cell, _) = grid_cells(
        settings,
        {"diabetes": frame},
        CONF["data_processing"],
        {**parameters, "random_search": broken},
    )
    record = run_cell(cell, frame, CONF["data_processing"])
    assert record["status"] == "failed" and "bayesian" in record["error"]
    assert record["cv_loss_curve"] == [] and "test_loss" not in record
