"""The leaderboard, members' contributions and permutation importance."""

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LinearRegression

from ensemble_bo.core.explanations import (
    ensemble_cv_loss,
    family,
    feature_importance,
    leaderboard,
    member_contributions,
)
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.results import EnsembleSearchResult
from ensemble_bo.core.trials import TrialResult


def regression_result() -> EnsembleSearchResult:
    """Target (0, 0, 0, 0); trials predicting 1, -1, 2 everywhere, one failed.
    Ensemble: trial 0 twice and trial 1 once (weights 2/3, 1/3)."""
    pool = Pool(4)
    for index, (value, config) in enumerate(
        [
            (1.0, {"regressor": "svr", "C": 1.0}),
            (-1.0, {"regressor": "ridge", "alpha": 2.0}),
            (2.0, {"regressor": "svr", "C": 3.0}),
        ]
    ):
        pool.add(
            config,
            np.array([index / 3]),
            TrialResult(
                np.full(4, value),
                0.1 * (index + 1),
                predict_seconds_per_1000=0.01 * (index + 1),
                model_bytes=2.0**20 * (index + 1),
            ),
        )
    pool.add({"regressor": "knn"}, np.array([1.0]), TrialResult(None, 0.5, "boom"))
    return EnsembleSearchResult(
        pool=pool,
        members=[0, 0, 1],
        single_losses=np.array([1.0, 1.0, 4.0, np.nan]),
        target=np.zeros(4),
        model_name="segor_sklearn",
        objective="mse",
    )


def test_the_ensemble_loss_without_each_member_by_hand():
    result = regression_result()
    # with both: mean prediction 2/3 * 1 + 1/3 * (-1) = 1/3, MSE 1/9
    assert ensemble_cv_loss(result, result.member_weights) == pytest.approx(1 / 9)
    # without trial 0: -1 everywhere, MSE 1; without trial 1: 1, MSE 1
    assert member_contributions(result) == pytest.approx({0: 1 - 1 / 9, 1: 1 - 1 / 9})
    assert np.isnan(ensemble_cv_loss(result, {}))


def test_the_vote_scores_the_error_objective():
    # labels (0, 1, 1); trial 0 predicts (0, 0, 1), trial 1 (1, 1, 1)
    pool = Pool(3, labels=np.array([0, 1, 1]))
    for predictions in ([0.0, 0.0, 1.0], [1.0, 1.0, 1.0]):
        pool.add({}, np.array([0.0]), TrialResult(np.array(predictions), 0.1))
    result = EnsembleSearchResult(
        pool=pool,
        members=[0, 1],
        single_losses=np.array([1 / 3, 1 / 3]),
        target=np.array([0, 1, 1]),
        objective="error",
    )
    # equal votes tie to the lowest class: (0, 0, 1) -> error 1/3
    assert ensemble_cv_loss(result, {0: 0.5, 1: 0.5}) == pytest.approx(1 / 3)
    # trial 1 alone: (1, 1, 1) -> error 1/3; with weight 0.7 it wins the ties
    assert ensemble_cv_loss(result, {0: 0.3, 1: 0.7}) == pytest.approx(1 / 3)
    assert ensemble_cv_loss(result, {0: 1.0}) == pytest.approx(1 / 3)


def test_the_leaderboard_ranks_trials_with_their_costs_and_weights():
    board = leaderboard(regression_result())
    assert board["trial"].tolist() == [0, 1, 2, 3]  # ties by trial; failed last
    assert board["family"].tolist() == ["svr", "ridge", "svr", "knn"]
    assert board["status"].tolist() == ["ok", "ok", "ok", "failed"]
    assert board["weight"].tolist() == pytest.approx([2 / 3, 1 / 3, 0, 0])
    assert board["model_mib"].tolist()[:3] == pytest.approx([1.0, 2.0, 3.0])
    assert board["predict_seconds_per_1000"].tolist()[:3] == pytest.approx(
        [0.01, 0.02, 0.03]
    )
    assert board["contribution"].isna().tolist() == [False, False, True, True]


def test_a_family_is_the_space_s_choice_or_the_model():
    assert family({"classifier": "knn", "k": 3}, "sego_sklearn") == "knn"
    assert family({"max_depth": 3}, "decision_tree_regressor") == (
        "decision_tree_regressor"
    )


def test_permutation_importance_finds_the_feature_the_target_depends_on():
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"signal": rng.normal(size=300), "noise": rng.normal(size=300)})
    y = pd.Series(3 * X["signal"] + 0.1 * rng.normal(size=300))
    model = LinearRegression().fit(X[:200], y[:200])
    importance = feature_importance(model, X[200:], y[200:], "regression", 0)
    assert importance["feature"].tolist() == ["signal", "noise"]
    # shuffling the signal costs about twice its variance times 9 in MSE
    assert importance["importance"].iloc[0] == pytest.approx(18, rel=0.3)
    assert abs(importance["importance"].iloc[1]) < 0.01
    assert (importance["importance_std"] >= 0).all()


def test_a_result_without_its_target_has_no_contributions():
    result = regression_result()
    result.target = None
    assert np.isnan(list(member_contributions(result).values())).all()
    assert leaderboard(result)["contribution"].isna().all()


def test_each_shuffle_of_many_rows_scores_a_sample_of_them(monkeypatch):
    scored = []

    class Counting(LinearRegression):
        def predict(self, X):
            scored.append(len(X))
            return super().predict(X)

    rng = np.random.default_rng(0)
    X = pd.DataFrame({"signal": rng.normal(size=500), "noise": rng.normal(size=500)})
    y = pd.Series(3 * X["signal"])
    model = Counting().fit(X, y)
    monkeypatch.setattr("ensemble_bo.core.explanations.PERMUTATION_ROWS", 100)
    monkeypatch.setattr("ensemble_bo.core.explanations.PERMUTATION_MIN_ROWS", 10)
    importance = feature_importance(model, X, y, "regression", 0, n_repeats=2)
    # the unshuffled score and 2 x 2 shuffles, each on the same 100 rows
    assert scored == [100] * 5
    assert importance["feature"].iloc[0] == "signal"

    # at most PERMUTATION_PREDICTIONS predicted rows: 50 // 5 = 10 rows
    scored.clear()
    monkeypatch.setattr("ensemble_bo.core.explanations.PERMUTATION_PREDICTIONS", 50)
    feature_importance(model, X, y, "regression", 0, n_repeats=2)
    assert scored == [10] * 5
    # ... but never under PERMUTATION_MIN_ROWS
    scored.clear()
    monkeypatch.setattr("ensemble_bo.core.explanations.PERMUTATION_MIN_ROWS", 40)
    feature_importance(model, X, y, "regression", 0, n_repeats=2)
    assert scored == [40] * 5
