"""Inputs that would mislead a search without a word: what is refused, what is
said, and what is left alone (every bundled dataset).

The table's cases as a `kedro run` sees them are in test_bad_inputs.py (CASES);
here: the bundled datasets, the same refusals in the Python API, the limits of
each rule, and the warning of more features than rows.
"""

from __future__ import annotations

import logging
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from ensemble_bo.api import EnsembleRegressor, default_parameters
from ensemble_bo.core.column_checks import check_target_scale, check_text_features
from ensemble_bo.core.preparation import prepare, validate_target
from ensemble_bo.core.validation import InvalidInput
from ensemble_bo.validation import check_raw_dataset, load_raw_dataset
from tests.support import PROJECT

RAW = PROJECT / "data" / "01_raw"
BUNDLED = sorted(path.stem for path in RAW.glob("*.csv"))
OPTIONS = default_parameters()["data_processing"]
RNG = np.random.default_rng(1)


@pytest.mark.parametrize("name", BUNDLED)
def test_no_bundled_dataset_is_refused_or_changed(name, caplog):
    frame = load_raw_dataset(name, RAW, "dataset", PROJECT)
    task = check_raw_dataset(frame, name, OPTIONS, f"data/01_raw/{name}.csv")
    with caplog.at_level(logging.WARNING, logger="ensemble_bo"):
        split, model_input = prepare(frame, name, OPTIONS, 0)
    # every column and row reaches the models, and nothing is warned of
    assert split.info["task"] == task
    assert list(split.train_features.columns) == list(frame.columns.drop("target"))
    assert len(split.train_features) + len(split.test_features) == len(frame)
    assert split.info["encoded_features"] == model_input.features.shape[1]
    assert model_input.features.shape[1] <= len(model_input.features)
    assert not caplog.records
    # a numeric target is a usable regression target too (digits, pima, ...)
    if pd.api.types.is_numeric_dtype(frame["target"]):
        assert validate_target(frame["target"], "regression", name) == "regression"


def concrete():
    return pd.read_csv(RAW / "concrete.csv")


@pytest.mark.parametrize(
    ("change", "fragment"),
    [
        (
            lambda d: d.assign(date=pd.date_range("2021-03-04", periods=len(d))),
            "X: feature column(s) ['date'] hold dates (e.g. ['2021-03-04 00:00:00'])",
        ),
        (
            lambda d: d.assign(
                date=pd.date_range("2021-03-04", periods=len(d)).strftime("%d/%m/%Y")
            ),
            "X: feature column(s) ['date'] hold dates (e.g. ['04/03/2021'])",
        ),
        (
            lambda d: d.assign(customer=[f"cust_{i:06d}" for i in range(len(d))]),
            "X: feature column(s) ['customer'] look like identifiers or free text",
        ),
        (
            lambda d: d.assign(target=d["target"].where(d.index != 17, 1e12)),
            "y: target column 'target' has 1 value(s) more than 1e+06 times its "
            "spread (interquartile range",
        ),
        (
            lambda d: d.assign(target=d["target"] * 1e298),
            "y: target column 'target' has 1030 value(s) beyond",
        ),
    ],
    ids=["datetimes", "day-first-dates", "identifiers", "target-1e12", "target-1e300"],
)
def test_the_python_api_refuses_the_same_inputs_before_any_trial(change, fragment):
    data = change(concrete())
    X, y = data.drop(columns="target"), data["target"]
    with pytest.raises(ValueError) as error:
        EnsembleRegressor(budget=1, random_state=0).fit(X, y)
    assert fragment in str(error.value)


def test_text_categories_with_many_values_or_month_names_are_not_refused():
    rows = 200
    features = pd.DataFrame(
        {
            # 40 values, each about five times: categories, not identifiers
            "shop": [f"shop_{i % 40}" for i in range(rows)],
            "month": RNG.choice(["January", "May", "June", "March"], size=rows),
            "version": RNG.choice(["1.2.3", "2.0.10"], size=rows),
            "code": [f"{i % 12:02d}-{i % 7}" for i in range(rows)],
        }
    )
    check_text_features(features, "X")
    # 20 distinct values in 20 rows: a small table's categories
    check_text_features(pd.DataFrame({"name": [f"n{i}" for i in range(20)]}), "X")


@pytest.mark.parametrize(
    "target",
    [
        RNG.lognormal(0.0, 3.0, size=5000),  # heavy-tailed: a spread of 1e6 or more
        np.r_[np.zeros(80), np.ones(20), 40.0],  # no IQR: the middle 98% is 0-1
        np.r_[np.zeros(99), 1e12],  # no spread at all among the middle values
    ],
    ids=["lognormal", "zero-inflated", "constant-but-one"],
)
def test_real_skewed_targets_are_not_refused(target):
    check_target_scale(target, "target column 'target'")


def test_without_an_interquartile_range_the_middle_98_percent_is_the_spread():
    target = np.r_[np.zeros(80), np.ones(20), 5e6]
    with pytest.raises(ValueError, match=r"\(middle 98% 1\) .*row\(s\) \[100\]"):
        check_target_scale(target, "target column 'target'")


def write(tmp_path: Path, name: str, text: str) -> Path:
    raw = tmp_path / "data" / "01_raw"
    raw.mkdir(parents=True, exist_ok=True)
    (raw / f"{name}.csv").write_text(text)
    return raw


@pytest.mark.parametrize("separator", [";", "\t", "|"])
def test_a_file_separated_by_anything_but_commas_is_refused_naming_it(
    tmp_path, separator
):
    text = f"a{separator}b{separator}target\n" + f"1{separator}2{separator}3\n" * 30
    raw = write(tmp_path, "other", text)
    with pytest.raises(InvalidInput) as error:
        load_raw_dataset("other", raw, "dataset", tmp_path)
    assert f"data/01_raw/other.csv is separated by {separator!r}, not by commas" in (
        str(error.value)
    )
    assert f"sep={separator!r}" in str(error.value)


def test_commas_are_never_second_guessed(tmp_path):
    # semicolons in quoted text, and a one-column file (refused later, for that)
    text = "a,note,target\n" + '1,"x; y; z",2\n' * 10
    raw = write(tmp_path, "quoted", text)
    assert load_raw_dataset("quoted", raw, "dataset", tmp_path).shape == (10, 3)
    raw = write(tmp_path, "single", "target\n1\n2\n3\n")
    assert load_raw_dataset("single", raw, "dataset", tmp_path).shape == (3, 1)


def test_more_features_than_rows_is_said_and_recorded(caplog):
    data = concrete()
    noise = pd.DataFrame(
        RNG.normal(size=(len(data), 1500)), columns=[f"noise_{i}" for i in range(1500)]
    )
    wide = pd.concat([noise, data], axis=1)
    with caplog.at_level(logging.WARNING, logger="ensemble_bo"):
        split, model_input = prepare(wide, "wide", OPTIONS, 0)
    assert split.info["encoded_features"] == 1508 == model_input.features.shape[1]
    assert [record.getMessage() for record in caplog.records] == [
        "wide: 1508 features (after one-hot encoding) for 690 training rows, more "
        "features than rows: models may overfit, and trials take longer; fewer, "
        "more informative columns usually serve better"
    ]
