"""Large data: a search on a sample of the rows, conformal fold models on a sample."""

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import Ridge
from sklearn.tree import DecisionTreeClassifier

from ensemble_bo import EnsembleRegressor
from ensemble_bo.core import refit
from ensemble_bo.core.evaluation import (
    check_row_limit,
    fold_row_share,
    out_of_fold_predictions,
)
from ensemble_bo.core.preparation import search_input
from ensemble_bo.core.validation import InvalidInput, check_settings
from tests.support import PROJECT, cheap_parameters, model_input


def test_the_share_keeps_every_conformal_fold_model_within_the_rows():
    fold_ids = np.repeat(np.arange(5), [21, 20, 20, 20, 19])  # 100 rows
    # the largest training part: 100 - 19 = 81 rows
    assert fold_row_share(None, fold_ids) == 1.0
    assert fold_row_share(200, fold_ids) == 1.0
    assert fold_row_share(27, fold_ids) == pytest.approx(27 / 81)
    assert check_row_limit(None) is None
    assert check_row_limit(5000) == 5000
    for bad in (99, 0, 1.5, "1000", True):
        with pytest.raises(ValueError, match=r"max_search_rows must be an integer"):
            check_row_limit(bad)
    with pytest.raises(InvalidInput, match=r"max_search_rows .* got -1"):
        check_settings("segor", cheap_parameters() | {"max_search_rows": -1})


def test_the_search_s_sample_is_seeded_and_keeps_each_fold_and_class_in_its_share():
    data = model_input(2000, "classification")
    sample = search_input(data, 400, seed=3)
    assert sample.sampled_from == 2000 and len(sample.target) == 400
    # 100 rows of each of the 4 folds, and in each 10 of class 1 (its 10%)
    assert np.bincount(sample.fold_ids).tolist() == [100] * 4
    for fold in range(4):
        assert np.bincount(sample.target[sample.fold_ids == fold]).tolist() == [90, 10]
    # rows of the data, in their order, each with its own target and fold
    rows = sample.features[:, 0].astype(int)
    assert (np.diff(rows) > 0).all()
    assert (sample.target == data.target[rows]).all()
    assert (sample.fold_ids == data.fold_ids[rows]).all()
    # the same seed gives the same sample, another seed another
    assert (search_input(data, 400, seed=3).features == sample.features).all()
    assert not np.array_equal(search_input(data, 400, seed=4).features, sample.features)
    # at or under the limit, or without one, the search has every row
    assert search_input(data, 2000, seed=3) is data
    assert search_input(data, None, seed=3) is data
    regression = search_input(model_input(1001, "regression"), 500, seed=0)
    assert len(regression.target) == 500 and regression.sampled_from == 1001
    with pytest.raises(ValueError, match="max_search_rows must be an integer >= 100"):
        search_input(data, 50, seed=0)


def test_a_classifier_s_sample_keeps_each_class_in_its_share():
    fitted = []

    class Recorder(DecisionTreeClassifier):
        def fit(self, X, y):
            fitted.append((frozenset(np.flatnonzero(X[:, 0] >= 0)), np.bincount(y)))
            return super().fit(X, y)

    n = 200
    y = (np.arange(n) % 10 == 0).astype(int)  # 10% of class 1
    X = np.column_stack([np.arange(n), np.zeros(n)]).astype(float)
    fold_ids = np.arange(n) % 4  # fold 0 out: 150 training rows, 10 of class 1
    for fraction in (0.2, 0.4):
        out_of_fold_predictions(
            Recorder(random_state=0), X, y, fold_ids, folds=[0], train_fraction=fraction
        )
    (small_rows, small), (large_rows, large) = fitted
    # 30 and 60 rows: 2 and 4 of class 1, exactly its share of 1/15
    assert small.tolist() == [28, 2] and large.tolist() == [56, 4]
    assert small_rows < large_rows  # a larger share trains on a superset


def test_a_search_on_a_sample_says_so_and_refits_on_every_row():
    raw = pd.read_csv(PROJECT / "data" / "01_raw" / "concrete.csv").head(400)
    X, y = raw.drop(columns="target"), raw["target"]
    search = EnsembleRegressor(
        budget=4, random_state=0, params={"max_search_rows": 150, "conformal": False}
    ).fit(X, y)
    assert search.result_.search_metrics["search_sample_rows"] == 150
    # the pool holds the sample's out-of-fold predictions: 150 rows of the 400
    assert search.result_.pool.n_samples == 150
    assert np.isfinite(search.result_.pool.predictions[search.result_.pool.ok]).all()
    whole = EnsembleRegressor(
        budget=4, random_state=0, params={"conformal": False}
    ).fit(X, y)
    assert "search_sample_rows" not in whole.result_.search_metrics
    # the sample changes what the trials saw, not the rows the ensemble is fitted on
    assert search.ensemble_.n_features_in_ == whole.ensemble_.n_features_in_


def test_conformal_fold_models_fit_on_a_sample_where_asked():
    raw = pd.read_csv(PROJECT / "data" / "01_raw" / "concrete.csv").head(400)
    X, y = raw.drop(columns="target"), raw["target"]
    search = EnsembleRegressor(
        budget=3, random_state=0, params={"conformal_rows": 160}
    ).fit(X, y)
    # 400 rows in 5 folds: 320 to fit each fold model on, 160 of them sampled
    assert search.conformal_.train_fraction == pytest.approx(0.5)
    assert np.isfinite(search.predict_interval(X.head(5), 0.9)).all()
    whole = EnsembleRegressor(budget=3, random_state=0).fit(X, y)
    assert whole.conformal_.train_fraction == 1.0  # by default, every row
    with pytest.raises(InvalidInput, match="conformal_rows must be an integer"):
        EnsembleRegressor(budget=3, params={"conformal_rows": 10}).fit(X, y)


def test_above_split_conformal_above_one_fold_calibrates_the_intervals():
    raw = pd.read_csv(PROJECT / "data" / "01_raw" / "concrete.csv").head(400)
    X, y = raw.drop(columns="target"), raw["target"]
    split = EnsembleRegressor(
        budget=3, random_state=0, params={"split_conformal_above": 300}
    ).fit(X, y)
    # 400 training rows > 300: one fold model, fitted without fold 0 (80
    # rows), whose rows calibrate
    assert split.conformal_.calibration_folds == (0,)
    assert len(split.conformal_.fold_estimators_) == 1
    assert len(split.conformal_.residuals_) == (split.fold_ids_ == 0).sum() == 80
    bounds = split.predict_interval(X.head(5), 0.9)
    assert (bounds[:, 0] < bounds[:, 1]).all()
    # at or under the threshold: CV+, a model per fold
    cv_plus = EnsembleRegressor(
        budget=3, random_state=0, params={"split_conformal_above": 400}
    ).fit(X, y)
    assert cv_plus.conformal_.calibration_folds is None
    assert len(cv_plus.conformal_.fold_estimators_) == 5
    assert len(cv_plus.conformal_.residuals_) == 400
    with pytest.raises(InvalidInput, match="split_conformal_above must be an integer"):
        EnsembleRegressor(budget=3, params={"split_conformal_above": 1.5}).fit(X, y)


class CountingRidge(Ridge):
    """A ridge regression that records how many rows each predict call had
    (module level: serving_costs pickles it)."""

    predicted: list[int] = []

    def predict(self, X):
        CountingRidge.predicted.append(len(X))
        return super().predict(X)


def test_the_prediction_time_is_measured_on_at_most_timed_rows(monkeypatch):
    X = np.random.default_rng(0).normal(size=(300, 2))
    model = CountingRidge().fit(X, X[:, 0])
    monkeypatch.setattr(refit, "TIMED_ROWS", 100)
    monkeypatch.setattr(CountingRidge, "predicted", [])
    costs = refit.serving_costs(model, pd.DataFrame(X))
    assert CountingRidge.predicted == [100, 100, 100]
    assert costs["ensemble_predict_seconds_per_1000"] > 0
