"""Dataset checks and how the task is decided (core/preparation.py)."""

import numpy as np
import pandas as pd
import pytest

from ensemble_bo.core.preparation import (
    MAX_CLASSES_FOR_AUTO,
    infer_task,
    prepare,
    validate_dataset,
    validate_target,
)

OPTIONS = {"target": "target", "task": "auto", "test_size": 0.33, "n_folds": 5}
RNG = np.random.default_rng(0)


def frame(target, **features):
    n = len(target)
    columns = features or {"x": RNG.normal(size=n)}
    return pd.DataFrame({**columns, "target": target})


def validate(data, **options):
    options = {**OPTIONS, **options}
    return validate_dataset(
        data,
        options["target"],
        options["task"],
        options["test_size"],
        options["n_folds"],
        "toy",
    )


# --- how the task is decided -------------------------------------------------------

MPA = [f"{value:.1f} MPa" for value in RNG.uniform(2, 80, size=100)]


@pytest.mark.parametrize(
    ("values", "task"),
    [
        (RNG.normal(size=100), "regression"),  # floats
        (np.arange(100) % 3, "classification"),  # few integer codes
        (np.arange(100) % 3 + 0.0, "classification"),  # integer-valued floats
        (np.arange(100) % 3 + 0.5, "regression"),  # few values, not integers
        (np.arange(100) % (MAX_CLASSES_FOR_AUTO + 1), "regression"),  # many ints
        (np.arange(100) % 2 == 0, "classification"),  # booleans
        (np.array(["spam", "ham"] * 50), "classification"),  # text labels
        (np.array([f"{v:.2f}" for v in RNG.normal(size=100)]), "regression"),
        (np.array(["1", "2", "3", "4"] * 25), "classification"),  # numeric text codes
        (np.array([chr(65 + i % 26) for i in range(2600)]), "classification"),
    ],
)
def test_auto_decides_the_task_from_the_target(values, task):
    assert infer_task(pd.Series(values, name="target")) == task


def test_an_explicit_task_overrides_the_decision():
    codes = pd.Series(np.arange(100) % 3, name="target")
    assert infer_task(codes, "regression") == "regression"
    floats = pd.Series(RNG.normal(size=100), name="target")
    assert infer_task(floats, "classification") == "classification"


@pytest.mark.parametrize(
    ("values", "tasks", "task"),
    [
        # a method of one task takes the target as that task where it can
        (np.arange(100) % 3, {"regression"}, "regression"),
        (np.arange(100) % 2 == 0, {"regression"}, "regression"),  # refused later
        (np.arange(100) % 50, {"classification"}, "classification"),  # many ints
        (np.arange(100) % 3 + 0.5, {"classification"}, "regression"),  # not classes
        (np.array(["spam", "ham"] * 50), {"classification"}, "classification"),
        # a method of both tasks leaves it to the target
        (np.arange(100) % 3, {"regression", "classification"}, "classification"),
        (np.arange(100) % 50, {"regression", "classification"}, "regression"),
    ],
)
def test_a_method_of_one_task_takes_the_target_as_that_task(values, tasks, task):
    assert infer_task(pd.Series(values, name="target"), "auto", "toy", tasks) == task


@pytest.mark.parametrize(
    ("values", "shown"),
    [(np.array(["low", "high"] * 30), "'low'"), (np.arange(60) % 2 == 0, "True")],
    ids=["text", "booleans"],
)
def test_regression_refuses_text_and_booleans_naming_a_value(values, shown):
    with pytest.raises(
        ValueError,
        match=r"toy: regression needs a numeric target, but column 'target' has "
        rf"dtype \w+ \(e.g. value {shown}\); make the column numeric",
    ):
        validate_target(pd.Series(values, name="target"), "regression", "toy")


def test_numbers_with_a_unit_are_refused_not_taken_for_classes():
    with pytest.raises(
        ValueError,
        match=r"target column 'target' holds text that looks like numbers with a "
        r"unit \(e.g. \['.* MPa'.*\]\).*strip the unit.*data_processing.task="
        "classification",
    ):
        infer_task(pd.Series(MPA, name="target"), "auto", "toy")


def test_text_with_mostly_unique_values_is_refused():
    names = pd.Series([f"customer {i:04d}x" for i in range(100)], name="target")
    names = names.str.replace("customer ", "c-")  # not numbers with a unit
    with pytest.raises(
        ValueError,
        match=r"has 100 distinct text values in 100 rows .* too many to be class "
        "labels; choose the column to predict with data_processing.target",
    ):
        infer_task(names, "auto", "toy")


def test_a_text_target_of_numbers_is_regression_on_the_numbers():
    values = RNG.uniform(2, 80, size=120)
    data = frame([f"{v:.3f}" for v in values]).astype({"target": object})
    split, model_input = prepare(data, "toy", OPTIONS, 0)
    assert split.info["task"] == "regression"
    assert split.train_target.dtype == float and split.test_target.dtype == float
    assert model_input.target.mean() == pytest.approx(0.0, abs=1e-12)


@pytest.mark.parametrize(
    "labels",
    [
        np.array(["yes", "no", "maybe"] * 30),
        np.arange(90) % 2 == 0,
        np.array([True, False] * 45, dtype=object),
    ],
    ids=["strings", "booleans", "boolean-objects"],
)
def test_text_and_boolean_labels_become_class_codes(labels):
    split, model_input = prepare(frame(labels), "toy", OPTIONS, 0)
    assert split.info["task"] == "classification"
    classes = np.unique(labels.astype(str))
    assert set(model_input.target) == set(range(len(classes)))


# --- bad datasets ------------------------------------------------------------------


def with_column(data, column, values):
    return data.assign(**{column: values})


REGRESSION = frame(RNG.normal(size=60))


@pytest.mark.parametrize(
    ("data", "options", "message"),
    [
        (pd.DataFrame(), {}, "the table has no columns (is the CSV file empty?)"),
        (
            pd.DataFrame(columns=["x", "target"]),
            {},
            "the table has a header (['x', 'target']) but no rows",
        ),
        (
            pd.DataFrame([[1, 2, 3]] * 20, columns=["x", "x", "target"]),
            {},
            "column name(s) ['x'] appear more than once",
        ),
        (
            REGRESSION,
            {"target": "price"},
            "target column 'price' not found; columns are ['x', 'target']; set "
            "data_processing.target",
        ),
        (
            REGRESSION[["target"]],
            {},
            "no feature columns besides the target 'target'",
        ),
        (
            with_column(REGRESSION, "empty", np.nan),
            {},
            "feature column(s) ['empty'] have no value at all (every row missing); "
            "drop them",
        ),
        (
            with_column(REGRESSION, "w", [np.inf, -np.inf] + [1.0] * 58),
            {},
            "feature column(s) ['w'] hold infinite values (inf or -inf; count per "
            "column: {'w': 2})",
        ),
        (
            with_column(REGRESSION, "target", 3.0),
            {},
            "target column 'target' has the same value (3.0) in every row: there is "
            "nothing to predict",
        ),
        (
            frame(np.array(["a"] * 60)),
            {"task": "classification"},
            "target column 'target' has the same value ('a') in every row",
        ),
        (
            with_column(REGRESSION, "target", [np.nan, 1.0] * 30),
            {},
            "target column 'target' has 30 missing value(s), first at row(s) "
            "[0, 2, 4, 6, 8]; drop or fill those rows",
        ),
        (
            with_column(REGRESSION, "target", [np.inf] + list(RNG.normal(size=59))),
            {},
            "target column 'target' has 1 infinite value(s), first at row(s) [0]",
        ),
        (
            frame(MPA),
            {"task": "regression"},
            "regression needs a numeric target, but column 'target' has dtype str "
            "(e.g. value",
        ),
        (
            frame(np.array(["a"] * 55 + ["b"] * 5)),
            {},
            "class 'b' of 'target' has only 5 rows, too few for 5 stratified folds "
            "after the 0.33 test split; lower data_processing.n_folds",
        ),
        (
            REGRESSION.head(12),
            {},
            "12 rows leave 8 for training after the 0.33 test split, too few for 5 "
            "folds (need 10); lower data_processing.n_folds",
        ),
        (REGRESSION, {"n_folds": 2.5}, "data_processing.n_folds must be an integer"),
        (REGRESSION, {"n_folds": "5"}, "data_processing.n_folds must be an integer"),
        (REGRESSION, {"test_size": 0}, "data_processing.test_size must be in (0, 1)"),
        (
            REGRESSION,
            {"task": "ranking"},
            "data_processing.task: unknown task 'ranking'",
        ),
    ],
    ids=[
        "empty",
        "header-only",
        "duplicate-columns",
        "no-target",
        "no-features",
        "all-nan-feature",
        "inf-feature",
        "constant-target",
        "single-class",
        "nan-target",
        "inf-target",
        "unit-target-as-regression",
        "class-too-small",
        "too-few-rows",
        "float-folds",
        "text-folds",
        "zero-test-size",
        "unknown-task",
    ],
)
def test_bad_datasets_are_refused_naming_the_value(data, options, message):
    with pytest.raises(ValueError) as error:
        validate(data, **options)
    assert message in str(error.value)
    assert str(error.value).startswith(("toy: ", "data_processing."))


def test_missing_feature_values_are_allowed():
    data = REGRESSION.assign(w=[np.nan, 1.0] * 30, c=["a", None] * 30)
    assert validate(data) == "regression"
