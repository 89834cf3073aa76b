"""Large data: a search whose fold models fit on a sample of the rows."""

import numpy as np
import pandas as pd
import pytest
from sklearn.tree import DecisionTreeClassifier

from ensemble_bo import EnsembleRegressor
from ensemble_bo.core.evaluation import (
    check_row_limit,
    out_of_fold_predictions,
    search_row_share,
)
from ensemble_bo.core.optimizer import RandomSearch
from ensemble_bo.core.settings import FidelitySettings
from ensemble_bo.core.space import SearchSpace
from ensemble_bo.core.validation import InvalidInput, check_settings
from tests.core.test_multi_fidelity import FOLDS, recording_evaluator
from tests.support import PROJECT, cheap_parameters, segor_search

SPACE = SearchSpace.from_dict({"max_depth": {"type": "int", "low": 1, "high": 6}})


def test_the_share_keeps_every_fold_model_within_the_rows():
    fold_ids = np.repeat(np.arange(5), [21, 20, 20, 20, 19])  # 100 rows
    # the largest training part: 100 - 19 = 81 rows
    assert search_row_share(None, fold_ids) == 1.0
    assert search_row_share(200, fold_ids) == 1.0
    assert search_row_share(27, fold_ids) == pytest.approx(27 / 81)
    assert check_row_limit(None) is None
    assert check_row_limit(5000) == 5000
    for bad in (99, 0, 1.5, "1000", True):
        with pytest.raises(ValueError, match=r"max_search_rows must be an integer"):
            check_row_limit(bad)
    with pytest.raises(InvalidInput, match=r"max_search_rows .* got -1"):
        check_settings("segor", cheap_parameters() | {"max_search_rows": -1})


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


def test_every_request_of_a_sampled_search_asks_for_the_sample():
    evaluate, y = recording_evaluator()
    search = segor_search(RandomSearch(SPACE, seed=2), evaluate, y, FOLDS, 3)
    result = search.run(4, row_share=0.5)
    assert evaluate.fractions == [0.5] * 4 and result.pool.ok.all()
    # every held-out row is still predicted
    assert np.isfinite(result.pool.predictions).all()
    # a rows rung's share is of the sample
    evaluate.fractions.clear()
    rows = FidelitySettings.from_block(
        {
            "scheduler": "successive_halving",
            "resource": "rows",
            "min_resource": 0.25,
            "eta": 2,
        }
    )
    segor_search(RandomSearch(SPACE, seed=2), evaluate, y, FOLDS, 3).run(
        3, fidelity=rows, row_share=0.5
    )
    assert evaluate.fractions == [0.125] * 4 + [0.25] * 2 + [0.5]
    with pytest.raises(ValueError, match="row_share must be in"):
        segor_search(RandomSearch(SPACE, seed=2), evaluate, y, FOLDS, 3).run(
            2, row_share=0.0
        )


def test_a_search_on_a_sample_says_so_and_refits_on_every_row():
    raw = pd.read_csv(PROJECT / "data" / "01_raw" / "concrete.csv").head(400)
    X, y = raw.drop(columns="target"), raw["target"]
    search = EnsembleRegressor(
        budget=4, random_state=0, params={"max_search_rows": 150, "conformal": False}
    ).fit(X, y)
    assert search.result_.search_metrics["search_sample_rows"] == 150
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
