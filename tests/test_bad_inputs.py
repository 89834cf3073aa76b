"""Every bad input is refused before anything is trained, with a message naming it.

`check_run_inputs` (what InputValidationHook runs before an MLflow run opens)
is given a project folder with the bad file or the bad parameter; each case
names the value, where it is and what to do, and no model is trained (the
evaluator is replaced by one that fails the test). The dataset cases are
also refused by the data_processing node itself, with the same message.
Inputs that users expect to work (text and boolean labels, missing feature
values for every model, a text target of numbers) run end to end.
"""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest

from ensemble_bo.api import default_parameters
from ensemble_bo.core import evaluation
from ensemble_bo.core.methods import run_method
from ensemble_bo.core.preparation import prepare
from ensemble_bo.core.refit import refit_and_score
from ensemble_bo.core.results import AllTrialsFailed
from ensemble_bo.core.validation import InvalidInput
from ensemble_bo.core.zoo import model_task
from ensemble_bo.pipelines.data_processing.nodes import validate_and_split
from ensemble_bo.validation import check_run_inputs

PARAMETERS = default_parameters()
RNG = np.random.default_rng(0)
ROWS = 90


def features(rows=ROWS):
    return pd.DataFrame(
        {
            "x1": RNG.normal(size=rows),
            "x2": RNG.uniform(size=rows),
            "colour": RNG.choice(["red", "green", "blue"], size=rows),
        }
    )


def regression(rows=ROWS):
    data = features(rows)
    return data.assign(target=2 * data["x1"] - data["x2"] + RNG.normal(size=rows))


def labelled(labels):
    return features(len(labels)).assign(target=labels)


def with_missing_values(data):
    data = data.copy()
    data.loc[RNG.random(len(data)) < 0.15, "x1"] = np.nan
    data.loc[RNG.random(len(data)) < 0.15, "colour"] = None
    return data


# name -> CSV text (a str) or table (a DataFrame) under data/01_raw/<name>.csv
DATASETS = {
    "good": regression(),
    "classes": labelled(RNG.choice(["setosa", "versicolor", "virginica"], size=ROWS)),
    "booleans": labelled(np.arange(ROWS) % 2 == 0),
    "missing_features": with_missing_values(regression()),
    "empty": "",
    "header_only": "x1,x2,target\n",
    "duplicate_columns": "x,x,target\n" + "1,2,3\n4,5,6\n" * 20,
    "inf_feature": regression().assign(x2=[np.inf] + [0.5] * (ROWS - 1)),
    "nan_feature_column": regression().assign(x3=np.nan),
    "unit_target": regression().assign(
        target=[f"{v:.1f} MPa" for v in RNG.uniform(2, 80, size=ROWS)]
    ),
    "numeric_text_target": regression().assign(
        target=[f"{v:.2f}" for v in RNG.uniform(2, 80, size=ROWS)]
    ),
    "constant_target": regression().assign(target=3.0),
    "single_class": labelled(["spam"] * ROWS),
    "nan_target": regression().assign(target=[np.nan] + [1.5] * (ROWS - 1)),
    "no_target": regression().rename(columns={"target": "price"}),
    "rare_class": labelled(["a"] * (ROWS - 4) + ["b"] * 4),
    # one value of 1e12 in a target of tens: its scale would be that value's
    "target_outlier": regression().assign(
        target=[*RNG.uniform(2, 80, size=7), 1e12, *RNG.uniform(2, 80, size=ROWS - 8)]
    ),
    # float64 cannot square and sum these over the rows
    "target_too_large": regression().assign(
        target=RNG.uniform(2, 80, size=ROWS) * 1e298
    ),
    "feature_dates": regression().assign(
        date=pd.date_range("2021-03-04", periods=ROWS).strftime("%Y-%m-%d")
    ),
    "feature_ids": regression().assign(
        customer=[f"cust_{number:06d}" for number in RNG.permutation(ROWS) + 100]
    ),
    "semicolons": regression().to_csv(index=False, sep=";"),
}


@pytest.fixture(scope="module")
def project(tmp_path_factory):
    root = tmp_path_factory.mktemp("project")
    raw = root / "data" / "01_raw"
    raw.mkdir(parents=True)
    for name, content in DATASETS.items():
        path = raw / f"{name}.csv"
        if isinstance(content, str):
            path.write_text(content)
        else:
            content.to_csv(path, index=False)
    return root


def parameters(**changes):
    """The shipped parameters with dotted paths changed (dataset `good` by default)."""
    result = copy.deepcopy(PARAMETERS)
    result["dataset"] = "good"
    for path, value in changes.items():
        *blocks, key = path.split("__")
        target = result
        for block in blocks:
            target = target[block]
        target[key] = value
    return result


@pytest.fixture
def nothing_is_trained(monkeypatch):
    def evaluate(*args, **kwargs):
        raise AssertionError("a model was trained before the inputs were checked")

    monkeypatch.setattr(evaluation, "evaluate_configuration", evaluate)
    monkeypatch.setattr(evaluation, "out_of_fold_predictions", evaluate)


SVR_C = {"type": "float", "low": 1.0e3, "high": 1.0e-2, "log": True}
SVR_LOG = {"type": "float", "low": 0.0, "high": 1.0e3, "log": True}

# (case id, pipeline, parameter changes, message fragments); `__` separates the
# blocks of a parameter path (segor__model is segor.model).
CASES = [
    (
        "inf-in-a-feature",
        "segor",
        {"dataset": "inf_feature"},
        [
            "inf_feature: feature column(s) ['x2'] hold infinite values",
            "replace them with finite numbers",
            "[data/01_raw/inf_feature.csv]",
        ],
    ),
    (
        "text-regression-target-with-unit",
        "segor",
        {"dataset": "unit_target"},
        ["holds text that looks like numbers with a unit", "MPa", "strip the unit"],
    ),
    (
        "constant-target",
        "segor",
        {"dataset": "constant_target"},
        ["target column 'target' has the same value (3.0) in every row"],
    ),
    (
        "single-class",
        "sego",
        {"dataset": "single_class"},
        ["target column 'target' has the same value ('spam') in every row"],
    ),
    (
        "budget-not-a-number",
        "segor",
        {"budget": "abc"},
        ["budget='abc' is not an integer >= 1", "--params budget=50"],
    ),
    ("budget-float", "smbo", {"budget": 2.5}, ["budget=2.5 is not an integer >= 1"]),
    ("budget-negative", "smbo", {"budget": -3}, ["budget=-3 is not an integer >= 1"]),
    ("seed-negative", "segor", {"seed": -1}, ["seed=-1 is not an integer >= 0"]),
    ("seed-float", "segor", {"seed": 0.5}, ["seed=0.5 is not an integer >= 0"]),
    (
        "n-folds-float",
        "segor",
        {"data_processing__n_folds": 2.5},
        ["data_processing.n_folds must be an integer >= 2, got 2.5"],
    ),
    (
        "n-folds-negative",
        "data_processing",
        {"data_processing__n_folds": -1},
        ["data_processing.n_folds must be an integer >= 2, got -1"],
    ),
    (
        "variant-grammar",
        "segor",
        {"ensemble__variant": "zz-q"},
        [
            "ensemble.variant: SEGOR variant 'zz-q': unknown ensemble size method "
            "'zz' and unknown regression loss 'q'",
            "<sizing>-<loss>: sizing f (fixed, F), g (best-growing, BG) or d "
            "(best-dynamic, BD); loss m (mse), h (huber) or t (tukey)",
        ],
    ),
    (
        "low-above-high",
        "segor",
        {"models__svr__C": SVR_C},
        [
            "models.svr.C in conf/base/parameters_models.yml (model 'svr')",
            "low=1000.0 is greater than high=0.01; swap them",
        ],
    ),
    (
        "log-with-low-zero",
        "segor",
        {"models__svr__gamma": SVR_LOG},
        [
            "models.svr.gamma in conf/base/parameters_models.yml (model 'svr')",
            "log scale needs low > 0, got low=0.0",
        ],
    ),
    (
        "unknown-dataset",
        "segor",
        {"dataset": "nosuch"},
        [
            "dataset='nosuch': there is no data/01_raw/nosuch.csv; available "
            "datasets: ['booleans', 'classes', 'constant_target',"
        ],
    ),
    (
        "posthoc-source-an-empty-run",
        "posthoc",
        {"posthoc_source": "runs:/"},
        ["posthoc_source='runs:/': name a run, runs:/<run id>"],
    ),
    (
        "posthoc-source-run-by-the-same-run",
        "smbo,posthoc",
        {"posthoc_source": "smbo"},
        [
            "posthoc_source='smbo' is also run by this run",
            "run `kedro run --pipelines=smbo` first",
        ],
    ),
    (
        "posthoc-source-not-a-method",
        "posthoc",
        {"posthoc_source": "smob"},
        ["posthoc_source='smob' is not a method"],
    ),
    ("empty-csv", "segor", {"dataset": "empty"}, ["data/01_raw/empty.csv is empty"]),
    (
        "header-only",
        "segor",
        {"dataset": "header_only"},
        ["header_only: the table has a header (['x1', 'x2', 'target']) but no rows"],
    ),
    (
        "duplicate-column-names",
        "segor",
        {"dataset": "duplicate_columns"},
        [
            "data/01_raw/duplicate_columns.csv: column name(s) ['x'] appear more "
            "than once in the header"
        ],
    ),
    (
        "feature-column-all-nan",
        "segor",
        {"dataset": "nan_feature_column"},
        ["feature column(s) ['x3'] have no value at all (every row missing)"],
    ),
    (
        "unknown-method",
        "segr",
        {},
        ["unknown pipeline 'segr'; known pipelines: ['benchmark', 'data_processing',"],
    ),
    (
        "unknown-model-space",
        "segor",
        {"segor__model": "xgboost"},
        [
            "segor.model='xgboost' is not a model of `models` "
            "(conf/base/parameters_models.yml); available: ["
        ],
    ),
    (
        "model-space-of-the-other-task",
        "smbo",
        {"smbo__model": "svm"},
        [
            "smbo.model='svm' is a classification model but the data is a "
            "regression task; choose one of"
        ],
    ),
    (
        "method-for-the-other-task",
        "segor",
        {"dataset": "classes"},
        [
            "dataset 'classes' is a classification task and segor builds regression "
            "ensembles; methods for classification: ['sego',",
            "or set data_processing.task",
        ],
    ),
    (
        "missing-target-column",
        "smbo",
        {"dataset": "no_target"},
        [
            "target column 'target' not found; columns are ['x1', 'x2', 'colour', "
            "'price']; set data_processing.target"
        ],
    ),
    (
        "nan-in-target",
        "smbo",
        {"dataset": "nan_target"},
        ["target column 'target' has 1 missing value(s), first at row(s) [0]"],
    ),
    (
        "folds-larger-than-a-class",
        "smbo",
        {"dataset": "rare_class"},
        ["class 'b' of 'target' has only 4 rows, too few for 5 stratified folds"],
    ),
    (
        "a-target-value-1e6-iqrs-from-the-median",
        "segor",
        {"dataset": "target_outlier"},
        [
            "target_outlier: target column 'target' has 1 value(s) more than 1e+06 "
            "times its spread (interquartile range",
            "row(s) [7] (value(s) [1000000000000.0])",
            "fix or drop those rows, or take the target's logarithm",
        ],
    ),
    (
        "target-values-float64-cannot-square",
        "smbo",
        {"dataset": "target_too_large"},
        [
            "target column 'target' has 90 value(s) beyond 7.07e+152 in magnitude, "
            "too large for float64 to square and average over 90 rows: row(s) "
            "[0, 1, 2, 3, 4] and 85 more (value(s) [",
            "rescale the column",
        ],
    ),
    (
        "a-date-column",
        "segor",
        {"dataset": "feature_dates"},
        [
            "feature_dates: feature column(s) ['date'] hold dates (e.g. "
            "['2021-03-04'])",
            "Turn each into numbers (e.g. days since the first date",
        ],
    ),
    (
        "an-identifier-column",
        "segor",
        {"dataset": "feature_ids"},
        [
            "feature_ids: feature column(s) ['customer'] look like identifiers or "
            "free text ('customer': 90 distinct values in 90 rows, e.g. ['cust_",
            "Drop the column(s)",
        ],
    ),
    (
        "semicolon-separated-csv",
        "segor",
        {"dataset": "semicolons"},
        [
            "data/01_raw/semicolons.csv is separated by ';', not by commas (its "
            "header: 'x1;x2;colour;target')",
            "pd.read_csv('data/01_raw/semicolons.csv', sep=';').to_csv("
            "'data/01_raw/semicolons.csv', index=False)",
        ],
    ),
    (
        "bad-max-initial-failures",
        "smbo",
        {"max_initial_failures": 0},
        ["max_initial_failures must be an integer >= 1 or null, got 0"],
    ),
    (
        "benchmark-bad-final-model",
        "benchmark",
        {"final_model": "bagging", "benchmark__datasets": ["good"]},
        [
            "final_model='bagging' is not one of ['refit', 'bagged'] (refit: each "
            "member refit on all training rows; bagged:"
        ],
    ),
    (
        "benchmark-unknown-dataset",
        "benchmark",
        {"benchmark__datasets": ["good", "nosuch"]},
        ["benchmark.datasets='nosuch': there is no data/01_raw/nosuch.csv"],
    ),
    (
        "benchmark-bad-variant",
        "benchmark",
        {"benchmark__datasets": ["good"], "benchmark__methods": ["segor:zz-q"]},
        [
            "benchmark.methods: 'segor:zz-q': SEGOR variant 'zz-q': unknown ensemble "
            "size method 'zz'"
        ],
    ),
]


@pytest.mark.parametrize(
    ("pipeline", "changes", "fragments"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_bad_inputs_are_refused_before_anything_is_trained(
    project, nothing_is_trained, pipeline, changes, fragments
):
    with pytest.raises(InvalidInput) as error:
        check_run_inputs(pipeline, parameters(**changes), project)
    message = str(error.value)
    for fragment in fragments:
        assert fragment in message


# The dataset cases the data_processing node itself also refuses (the catalog
# loads the file first, so an empty file or a repeated header name is the
# hook's to catch: pandas renames the second `x` to `x.1`).
NODE_CASES = [
    case
    for case in CASES
    if set(case[2]) == {"dataset"}
    and case[2]["dataset"] in DATASETS
    and not isinstance(DATASETS[case[2]["dataset"]], str)
    and case[0] != "method-for-the-other-task"
]


@pytest.mark.parametrize(
    ("changes", "fragments"),
    [case[2:] for case in NODE_CASES],
    ids=[case[0] for case in NODE_CASES],
)
def test_the_data_processing_node_refuses_the_same_datasets(changes, fragments):
    name = changes["dataset"]
    with pytest.raises(ValueError) as error:
        validate_and_split(DATASETS[name], name, PARAMETERS["data_processing"], 0)
    for fragment in fragments:
        if not fragment.startswith("[data/"):
            assert fragment in str(error.value)


@pytest.mark.parametrize(
    ("pipeline", "dataset"),
    [
        ("segor", "good"),
        ("sego", "classes"),
        ("smbo", "booleans"),
        ("esmbo", "missing_features"),
        ("random_search", "numeric_text_target"),
        ("posthoc", "good"),  # whether the store has the pool: tracking's check
        ("benchmark", None),
    ],
)
def test_good_inputs_pass(project, nothing_is_trained, pipeline, dataset):
    changes = {"dataset": dataset} if dataset else {}
    if pipeline == "posthoc":
        changes["posthoc_source"] = "segor"
    if pipeline == "benchmark":
        changes = {"benchmark__datasets": ["good", "classes", "booleans"]}
    check_run_inputs(pipeline, parameters(**changes), project)


def test_the_task_override_makes_a_unit_target_usable_as_classes_or_not(project):
    # classification is allowed (the user says so), but each value is its own
    # class, too rare for the folds: the message says that, not "MPa" again
    with pytest.raises(InvalidInput, match="has only 1 rows, too few for 5"):
        check_run_inputs(
            "smbo",
            parameters(dataset="unit_target", data_processing__task="classification"),
            project,
        )


# --- what must work, end to end --------------------------------------------------------

TINY_SEARCH = {"n_initial": 2, "kind": "gp", "gp_restarts": 1, "n_candidates": 64}


def search_settings(method, model, budget=2):
    settings = parameters(budget=budget)
    block = {"segor": "segor", "sego": "sego"}.get(method, method)
    settings[block] = {
        **settings[block],
        "model": model,
        "time_limit": None,
        "optimizer": TINY_SEARCH,
    }
    return settings


def run_end_to_end(data, method, model, budget=2, seed=0):
    """Prepare, search, refit and score, as the pipelines do; the test metrics."""
    split, model_input = prepare(data, "toy", PARAMETERS["data_processing"], seed)
    result = run_method(
        method, model_input, search_settings(method, model, budget), seed
    )
    _, metrics, _ = refit_and_score(
        result,
        split.train_features,
        split.train_target,
        split.test_features,
        split.test_target,
        model_input.encoding,
        model_input.target_scaling,
        "hard",
        seed,
    )
    return split, metrics


REGRESSION_SPACES = sorted(
    name for name in PARAMETERS["models"] if model_task(name) == "regression"
)
CLASSIFICATION_SPACES = sorted(set(PARAMETERS["models"]) - set(REGRESSION_SPACES))


@pytest.mark.filterwarnings("ignore::sklearn.exceptions.ConvergenceWarning")
@pytest.mark.parametrize("model", REGRESSION_SPACES + CLASSIFICATION_SPACES)
def test_missing_feature_values_work_for_every_model_space(model):
    data = DATASETS["missing_features"]
    if model in CLASSIFICATION_SPACES:
        data = data.assign(target=np.where(data["x1"].fillna(0) > 0, "high", "low"))
    _, metrics = run_end_to_end(data, "random_search", model)
    assert metrics["trials_failed"] == 0
    assert all(np.isfinite(value) for value in metrics.values())


@pytest.mark.parametrize("dataset", ["classes", "booleans"])
def test_text_and_boolean_labels_work_end_to_end(dataset):
    split, metrics = run_end_to_end(DATASETS[dataset], "sego", "sego_sklearn", 3)
    assert split.info["task"] == "classification"
    assert 0.0 <= metrics["test_error_ensemble"] <= 1.0


def test_a_text_target_of_numbers_works_as_regression():
    split, metrics = run_end_to_end(
        DATASETS["numeric_text_target"], "segor", "decision_tree_regressor", 3
    )
    assert split.info["task"] == "regression"
    assert np.isfinite(metrics["test_mse_ensemble"])


def test_a_search_whose_every_trial_fails_stops_early_and_never_refits():
    # C < 0 is refused by SVR at fit time: every configuration fails to train
    settings = search_settings("smbo", "svr", budget=30)
    settings["models"] = copy.deepcopy(settings["models"])
    settings["models"]["svr"]["C"] = {"type": "float", "low": -2.0, "high": -1.0}
    _, model_input = prepare(DATASETS["good"], "toy", PARAMETERS["data_processing"], 0)
    with pytest.raises(AllTrialsFailed) as error:
        run_method("smbo", model_input, settings, 0)
    assert len(error.value.result.pool) == 10  # max_initial_failures, not 30
    # the ten errors differ only in the value of C: one distinct error
    message = str(error.value)
    assert message.startswith(
        "the first 10 trials of model 'svr' all failed, so the search "
        "stopped before its budget of 30 (max_initial_failures=10). Distinct "
        "errors: (1) InvalidParameterError: The 'C' parameter"
    )
    assert "[10 trials]" in message and "(2)" not in message
