from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ensemble_bo.core.preparation import prepare
from ensemble_bo.pipelines.data_processing.nodes import (
    make_model_input,
    validate_and_split,
)

RAW = Path(__file__).resolve().parents[2] / "data" / "01_raw"
OPTIONS = {"target": "target", "task": "auto", "test_size": 0.33, "n_folds": 5}


def split(data, name="toy", seed=0, **options):
    return validate_and_split(data, name, {**OPTIONS, **options}, seed)


def test_concrete_is_split_standardized_and_folded():
    raw = pd.read_csv(RAW / "concrete.csv")
    parts = split(raw, "concrete")
    info = parts["dataset_info"]
    assert info["task"] == "regression" and info["rows"] == 1030
    assert len(parts["test_features"]) == 340 and len(parts["train_features"]) == 690
    assert "target" not in parts["train_features"].columns
    model_input = make_model_input(
        parts["train_features"], parts["train_target"], info, OPTIONS, seed=0
    )
    y = model_input.target
    assert y.mean() == pytest.approx(0.0, abs=1e-12) and y.std() == pytest.approx(1.0)
    scaling = model_input.target_scaling
    np.testing.assert_allclose(
        y * scaling["std"] + scaling["mean"], parts["train_target"]
    )
    folds = model_input.fold_ids
    assert sorted(np.unique(folds)) == [0, 1, 2, 3, 4]
    assert np.bincount(folds).min() >= 690 // 5


def test_categoricals_are_one_hot_encoded():
    raw = pd.read_csv(RAW / "auto_mpg.csv")
    parts = split(raw, "auto_mpg")
    assert parts["dataset_info"]["categorical_columns"] == ["origin"]
    model_input = make_model_input(
        parts["train_features"],
        parts["train_target"],
        parts["dataset_info"],
        OPTIONS,
        0,
    )
    # 6 numeric columns + one column per origin (american, european, japanese)
    assert model_input.features.shape == (
        len(parts["train_features"]),
        9,
    )


def test_same_seed_same_split_other_seed_other_split():
    raw = pd.read_csv(RAW / "boston.csv")
    first, again, other = split(raw, seed=3), split(raw, seed=3), split(raw, seed=4)
    pd.testing.assert_frame_equal(first["test_features"], again["test_features"])
    assert not first["test_features"].equals(other["test_features"])


def test_classification_split_is_stratified():
    raw = pd.read_csv(RAW / "wine.csv")
    parts = split(raw, "wine")
    assert parts["dataset_info"]["task"] == "classification"
    overall = raw["target"].value_counts(normalize=True).sort_index()
    test = parts["test_target"].value_counts(normalize=True).sort_index()
    np.testing.assert_allclose(test, overall, atol=0.02)


def test_class_labels_become_codes_in_sorted_label_order():
    rng = np.random.default_rng(1)
    labels = np.array(["spam", "ham", "eggs"])[np.arange(90) % 3]
    raw = pd.DataFrame({"x": rng.normal(size=90), "target": labels})
    parts = split(raw, "menu")
    model_input = make_model_input(
        parts["train_features"],
        parts["train_target"],
        parts["dataset_info"],
        OPTIONS,
        0,
    )
    codes = model_input.target
    # eggs -> 0, ham -> 1, spam -> 2
    expected = parts["train_target"].map({"eggs": 0, "ham": 1, "spam": 2})
    np.testing.assert_array_equal(codes, expected.to_numpy())


def regression_frame(n=60):
    rng = np.random.default_rng(0)
    return pd.DataFrame({"x": rng.normal(size=n), "target": rng.normal(size=n)})


def test_missing_target_column_is_named():
    with pytest.raises(
        ValueError,
        match=r"toy: target column 'price' not found; columns are \['x', 'target'\]",
    ):
        split(regression_frame(), target="price")


def test_non_numeric_regression_target_is_named():
    data = regression_frame().astype({"target": object})
    data.loc[4, "target"] = "n/a"
    with pytest.raises(
        ValueError,
        match=r"numeric target, but column 'target' has dtype object \(e.g. value 'n/a'\)",
    ):
        split(data, task="regression")


def test_nan_in_target_is_named():
    data = regression_frame()
    data.loc[[7, 9], "target"] = np.nan
    with pytest.raises(
        ValueError,
        match=r"'target' has 2 missing value\(s\), first at row\(s\) \[7, 9\]",
    ):
        split(data)


def test_too_few_rows_for_the_folds():
    with pytest.raises(
        ValueError, match="12 rows leave 8 for training .* too few for 5 folds"
    ):
        split(regression_frame(12))


def test_class_smaller_than_the_folds():
    data = pd.DataFrame({"x": np.arange(40.0), "target": ["a"] * 35 + ["b"] * 5})
    with pytest.raises(
        ValueError,
        match="class 'b' of 'target' has only 5 rows, too few for 5 stratified folds",
    ):
        split(data)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"test_size": 1.5}, "test_size must be in \\(0, 1\\), got 1.5"),
        ({"n_folds": 1}, "n_folds must be an integer >= 2, got 1"),
        ({"task": "ranking"}, "unknown task 'ranking'"),
    ],
)
def test_bad_options_are_named(options, message):
    with pytest.raises(ValueError, match=message):
        split(regression_frame(), **options)


def test_constant_target_is_refused_before_the_split():
    data = regression_frame().assign(target=3.0)
    with pytest.raises(
        ValueError,
        match=r"target column 'target' has the same value \(3.0\) in every row: "
        "there is nothing to predict",
    ):
        split(data, task="regression")


def test_constant_regression_target_on_the_training_part():
    data = regression_frame()
    parts = split(data, task="regression")
    with pytest.raises(
        ValueError, match="target 'target' is constant on the training part"
    ):
        make_model_input(
            parts["train_features"],
            parts["train_target"].map(lambda _: 3.0),
            parts["dataset_info"],
            OPTIONS,
            0,
        )


def test_the_pipeline_nodes_prepare_what_the_benchmark_s_prepare_does():
    raw = pd.read_csv(RAW / "auto_mpg.csv")
    parts = split(raw, "auto_mpg", seed=4)
    node_input = make_model_input(
        parts["train_features"],
        parts["train_target"],
        parts["dataset_info"],
        OPTIONS,
        4,
    )
    data_split, model_input = prepare(raw, "auto_mpg", OPTIONS, 4)
    assert data_split.info == parts["dataset_info"]
    pd.testing.assert_frame_equal(data_split.test_features, parts["test_features"])
    np.testing.assert_array_equal(model_input.features, node_input.features)
    np.testing.assert_array_equal(model_input.target, node_input.target)
    np.testing.assert_array_equal(model_input.fold_ids, node_input.fold_ids)
    assert model_input.target_scaling == node_input.target_scaling
