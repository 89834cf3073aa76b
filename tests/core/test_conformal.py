"""CV+ intervals and cross-conformal sets: hand-computed cases, MAPIE on the
same folds, the coverage guarantee by simulation, and bad inputs."""

import math
import pickle

import numpy as np
import pandas as pd
import pytest
import skops.io
from mapie.classification import CrossConformalClassifier as MapieClassifier
from mapie.classification import SplitConformalClassifier
from mapie.regression import CrossConformalRegressor as MapieRegressor
from mapie.regression import SplitConformalRegressor
from sklearn.datasets import make_classification, make_regression
from sklearn.dummy import DummyRegressor
from sklearn.ensemble import RandomForestRegressor
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import KFold, StratifiedKFold

from ensemble_bo import EnsembleRegressor
from ensemble_bo.core.conformal import (
    CrossConformalClassifier,
    CrossConformalRegressor,
    conformal_rank,
    conformal_reachable,
    cross_conformal_sets,
    cv_plus_intervals,
    expected_calibration_error,
)
from ensemble_bo.core.encoding import FeatureEncoding
from ensemble_bo.core.estimator import build_ensemble_model, member_spread
from ensemble_bo.core.refit import serving_costs
from ensemble_bo.core.validation import InvalidInput, check_settings
from tests.support import cheap_parameters


def _fold_ids(splitter, X, y) -> np.ndarray:
    fold_ids = np.empty(len(y), dtype=int)
    for fold, (_, held_out) in enumerate(splitter.split(X, y)):
        fold_ids[held_out] = fold
    return fold_ids


def test_cv_plus_takes_the_order_statistics_of_barber_et_al():
    # n = 4, coverage 0.6: alpha (n+1) = 2, (1 - alpha)(n+1) = 3.
    # mu_{-k(i)}(x) + R_i = 10+1, 10+2, 20+3, 20+4: the 3rd smallest is 23.
    # mu_{-k(i)}(x) - R_i = 9, 8, 17, 16: the 2nd smallest is 9.
    bounds = cv_plus_intervals(
        np.array([[10.0], [20.0]]),
        np.array([1.0, 2, 3, 4]),
        np.array([0, 0, 1, 1]),
        0.6,
    )
    np.testing.assert_array_equal(bounds, [[9.0, 23.0]])


def test_cross_conformal_sets_count_the_training_scores_below_each_new_score():
    # n = 4, coverage 0.6: rank 3; a class joins while fewer than 3 training
    # scores lie strictly below its score from the fold that held them out.
    # Fold 0 holds scores 0.1, 0.5; fold 1 holds 0.2, 0.3.
    scores = np.array([0.1, 0.5, 0.2, 0.3])
    folds = np.array([0, 0, 1, 1])
    # class 0: new score 0.4 (fold 0) -> 1 below; 0.25 (fold 1) -> 1 below: 2 < 3, in
    # class 1: 0.6 -> 2 below; 0.35 -> 2 below: 4, out
    fold_scores = np.array([[[0.4, 0.6]], [[0.25, 0.35]]])
    np.testing.assert_array_equal(
        cross_conformal_sets(fold_scores, scores, folds, 0.6), [[True, False]]
    )


def test_conformal_rank_is_ceil_of_coverage_times_n_plus_one():
    assert conformal_rank(0.9, 99) == 90  # 0.9 * 100 is exactly the 90th
    assert conformal_rank(0.9, 100) == 91  # ceil(90.9)
    assert conformal_rank(0.5, 1) == 1


@pytest.mark.parametrize("coverage", [0.0, 1.0, 1.5, -0.1, True])
def test_a_coverage_outside_0_1_is_refused_naming_it(coverage):
    with pytest.raises(
        ValueError, match=rf"coverage must be in \(0, 1\), got {coverage!r}"
    ):
        conformal_rank(coverage, 100)


def test_a_coverage_too_high_for_the_rows_names_the_rows_it_needs():
    # 0.99 needs ceil(0.99 (n+1)) <= n, i.e. n >= 99.
    with pytest.raises(
        ValueError, match="needs at least 99 training rows.*there are 50"
    ):
        conformal_rank(0.99, 50)
    assert conformal_rank(0.99, 99) == 99
    assert not conformal_reachable(0.99, 50) and conformal_reachable(0.99, 99)


def _regression(n_train=200, n_test=100, seed=0):
    X, y = make_regression(n_train + n_test, 5, noise=10.0, random_state=seed)
    return X[:n_train], y[:n_train], X[n_train:], y[n_train:]


@pytest.mark.parametrize("coverage", [0.8, 0.9, 0.95])
def test_intervals_equal_mapies_cv_plus_on_the_same_folds(coverage):
    X, y, X_test, _ = _regression()
    splitter = KFold(5, shuffle=True, random_state=0)
    ours = CrossConformalRegressor(Ridge(), _fold_ids(splitter, X, y)).fit(X, y)
    mapie = MapieRegressor(
        Ridge(), confidence_level=coverage, method="plus", cv=splitter
    ).fit_conformalize(X, y)
    _, mapie_bounds = mapie.predict_interval(X_test)
    np.testing.assert_allclose(
        ours.predict_interval(X_test, coverage), mapie_bounds[:, :, 0], rtol=1e-12
    )
    # predict is the model refit on all rows
    np.testing.assert_allclose(ours.predict(X_test), Ridge().fit(X, y).predict(X_test))


@pytest.mark.parametrize("coverage", [0.8, 0.9, 0.95])
def test_sets_equal_mapies_cross_conformal_sets_on_the_same_folds(coverage):
    # n = 301: MAPIE's rule (count >= alpha (n - 1)) and the cross-conformal
    # p-value's (count >= floor(alpha (n + 1))) agree at these coverages.
    X, y = make_classification(400, 6, n_informative=4, n_classes=3, random_state=0)
    X, y, X_test = X[:301], y[:301], X[301:]
    splitter = StratifiedKFold(5, shuffle=True, random_state=0)
    ours = CrossConformalClassifier(LogisticRegression(), _fold_ids(splitter, X, y))
    ours.fit(X, y)
    mapie = MapieClassifier(
        LogisticRegression(), confidence_level=coverage, cv=splitter
    ).fit_conformalize(X, y)
    _, mapie_sets = mapie.predict_set(X_test, agg_scores="crossval")
    sets = ours.predict_set(X_test, coverage)
    np.testing.assert_array_equal(sets, mapie_sets[:, :, 0])
    assert 1 < sets.sum(axis=1).mean() < 3  # neither trivial nor everything


def test_cv_plus_covers_as_guaranteed_over_many_seeds():
    # Barber et al., Theorem 4: coverage >= 1 - 2 alpha - min(...) for any
    # model; for a sensible one close to 1 - alpha. 200 seeds x 100 test rows.
    coverages = []
    for seed in range(200):
        X, y, X_test, y_test = _regression(n_train=100, n_test=100, seed=seed)
        fold_ids = np.arange(len(y)) % 5
        bounds = (
            CrossConformalRegressor(Ridge(), fold_ids)
            .fit(X, y)
            .predict_interval(X_test, 0.9)
        )
        coverages.append(np.mean((bounds[:, 0] <= y_test) & (y_test <= bounds[:, 1])))
    assert 0.88 <= np.mean(coverages) <= 0.93
    assert np.quantile(coverages, 0.05) >= 0.8


def test_cross_conformal_sets_cover_as_guaranteed_over_many_seeds():
    coverages = []
    for seed in range(100):
        X, y = make_classification(
            300, 6, n_informative=3, n_classes=3, flip_y=0.1, random_state=seed
        )
        fold_ids = np.arange(200) % 5
        model = CrossConformalClassifier(LogisticRegression(), fold_ids)
        sets = model.fit(X[:200], y[:200]).predict_set(X[200:], 0.9)
        coverages.append(sets[np.arange(100), y[200:]].mean())
    assert 0.88 <= np.mean(coverages) <= 0.94


def test_a_fold_that_never_saw_a_class_gives_it_probability_0():
    # Rows 0-3 (fold 0) are the only "c" rows: fold 0's model never saw "c".
    X = np.arange(12.0).reshape(-1, 1)
    y = np.array(["c"] * 4 + ["a", "b"] * 4)
    fold_ids = np.array([0] * 4 + [1] * 4 + [2] * 4)
    model = CrossConformalClassifier(LogisticRegression(), fold_ids).fit(X, y)
    np.testing.assert_array_equal(model.classes_, ["a", "b", "c"])
    # each held-out "c" row scored 1 - 0 = 1 by the model that never saw "c"
    np.testing.assert_array_equal(model.scores_[:4], 1.0)
    assert model.predict_set(X, 0.5).shape == (12, 3)


def test_bad_fold_ids_are_refused():
    X, y, _, _ = _regression(n_train=20, n_test=1)
    with pytest.raises(ValueError, match="fold of each of the 20 rows"):
        CrossConformalRegressor(Ridge(), np.zeros(19)).fit(X, y)
    with pytest.raises(ValueError, match="at least two folds"):
        CrossConformalRegressor(Ridge(), np.zeros(20)).fit(X, y)


def test_the_fold_estimator_replaces_the_final_model_in_the_folds():
    # Final model: Ridge; fold models: the training mean (DummyRegressor).
    X, y, X_test, _ = _regression(n_train=50, n_test=5)
    fold_ids = np.arange(50) % 2
    model = CrossConformalRegressor(Ridge(), fold_ids, DummyRegressor()).fit(X, y)
    assert all(isinstance(m, DummyRegressor) for m in model.fold_estimators_)
    for j, fold in enumerate(model.fold_estimators_):
        assert fold.constant_[0][0] == pytest.approx(y[fold_ids != j].mean())
    np.testing.assert_allclose(
        model.residuals_[fold_ids == 0],
        np.abs(y[fold_ids == 0] - y[fold_ids == 1].mean()),
    )


def test_a_fitted_conformal_model_round_trips_through_skops():
    X, y, X_test, _ = _regression(n_train=60, n_test=5)
    model = CrossConformalRegressor(Ridge(), np.arange(60) % 3).fit(X, y)
    data = skops.io.dumps(model)
    loaded = skops.io.loads(data, trusted=skops.io.get_untrusted_types(data=data))
    np.testing.assert_array_equal(
        loaded.predict_interval(X_test), model.predict_interval(X_test)
    )


def test_expected_calibration_error_by_hand():
    # Two bins used of 10: confidences 0.95, 0.95 (one right) in (0.9, 1];
    # 0.6, 0.6, 0.6 (all right) in (0.5, 0.6].
    # ECE = 2/5 |0.5 - 0.95| + 3/5 |1 - 0.6| = 0.18 + 0.24 = 0.42
    probabilities = np.array(
        [[0.95, 0.05], [0.05, 0.95], [0.6, 0.4], [0.4, 0.6], [0.6, 0.4]]
    )
    labels = np.array([0, 0, 0, 1, 0])
    error, table = expected_calibration_error(probabilities, labels)
    assert error == pytest.approx(0.42)
    assert [(row["bin_lower"], row["rows"], row["accuracy"]) for row in table] == [
        (pytest.approx(0.5), 3, 1.0),
        (pytest.approx(0.9), 2, 0.5),
    ]
    assert table[1]["mean_confidence"] == pytest.approx(0.95)


@pytest.mark.parametrize("value", ["yes", None, 1])
def test_a_bad_conformal_value_is_refused_naming_it(value):
    parameters = cheap_parameters() | {"conformal": value}
    with pytest.raises(
        InvalidInput, match=rf"conformal={value!r} is not true or false"
    ):
        check_settings("segor", parameters)
    with pytest.raises(ValueError, match=rf"conformal={value!r} is not true or false"):
        EnsembleRegressor(budget=2, params={"conformal": value}).fit(
            pd.DataFrame({"x": np.arange(20.0)}), np.arange(20.0)
        )


def test_normalized_cv_plus_scales_each_residual_to_the_new_row():
    # scaled residuals 1, 2 (fold 0) and 3, 4 (fold 1); the new row's scale is
    # 2 by fold 0 and 1 by fold 1: margins 2, 4, 3, 4; coverage 0.6: rank 3.
    # upper: 3rd smallest of 10+2, 10+4, 20+3, 20+4 = 23
    # lower: -(3rd smallest of 2-10, 4-10, 3-20, 4-20) = -(-8) = 8
    bounds = cv_plus_intervals(
        np.array([[10.0], [20.0]]),
        np.array([1.0, 2, 3, 4]),
        np.array([0, 0, 1, 1]),
        0.6,
        fold_scales=np.array([[2.0], [1.0]]),
    )
    np.testing.assert_array_equal(bounds, [[8.0, 23.0]])


def _spread_of_x0(model, X) -> np.ndarray:
    return np.abs(np.asarray(X)[:, 0])


def test_adaptive_intervals_follow_the_noise_and_still_cover():
    # noise proportional to |x0|: adaptive intervals are narrow where it is
    # small, wide where it is large, and cover 90% over many seeds
    coverages, narrow, wide = [], [], []
    for seed in range(100):
        rng = np.random.default_rng(seed)
        X = rng.normal(size=(300, 2))
        y = X[:, 1] + np.abs(X[:, 0]) * rng.normal(size=300)
        model = CrossConformalRegressor(
            Ridge(), np.arange(200) % 5, spread=_spread_of_x0
        ).fit(X[:200], y[:200])
        bounds = model.predict_interval(X[200:], 0.9, adaptive=True)
        inside = (bounds[:, 0] <= y[200:]) & (y[200:] <= bounds[:, 1])
        coverages.append(inside.mean())
        widths = bounds[:, 1] - bounds[:, 0]
        small = np.abs(X[200:, 0]) < 0.5
        narrow.append(widths[small].mean())
        wide.append(widths[~small].mean())
    assert 0.87 <= np.mean(coverages) <= 0.93
    assert np.mean(narrow) < 0.6 * np.mean(wide)
    plain = CrossConformalRegressor(Ridge(), np.arange(200) % 5).fit(X[:200], y[:200])
    with pytest.raises(ValueError, match="adaptive intervals need a spread"):
        plain.predict_interval(X[200:], adaptive=True)


def test_the_members_spread_is_their_weighted_standard_deviation():
    # members predict the constants 0 and 10 (quantile 0 and 1 of y); weights
    # 0.75, 0.25: mean 2.5, sd sqrt(0.75 * 2.5**2 + 0.25 * 7.5**2) = 4.33
    X = pd.DataFrame({"x": np.arange(11.0)})
    y = np.arange(11.0)
    members = [
        DummyRegressor(strategy="quantile", quantile=0.0),
        DummyRegressor(strategy="quantile", quantile=1.0),
    ]
    model = build_ensemble_model(
        "regression", members, [0.75, 0.25], FeatureEncoding()
    ).fit(X, y)
    np.testing.assert_allclose(member_spread(model, X), np.sqrt(18.75))


def test_serving_costs_size_the_ensemble_and_the_fold_models_each_once():
    X, y, X_test, _ = _regression(n_train=60, n_test=20)
    forest = RandomForestRegressor(n_estimators=5, random_state=0)
    model = CrossConformalRegressor(forest, np.arange(len(y)) % 4).fit(X, y)
    costs = serving_costs(model, pd.DataFrame(X_test))
    assert costs["ensemble_predict_seconds_per_1000"] > 0
    assert costs["ensemble_model_mb"] == pytest.approx(
        len(pickle.dumps(model.estimator_, protocol=5)) / 1e6
    )
    # the ensemble and the rest, each pickled once: the whole model's pickle
    # but for a few bytes of framing
    whole = len(pickle.dumps(model, protocol=5)) / 1e6
    assert costs["final_model_mb"] == pytest.approx(whole, rel=0.01)
    assert hasattr(model, "estimator_")  # the model itself is left whole
    assert costs["final_model_mb"] > 4 * costs["ensemble_model_mb"]
    plain = serving_costs(model.estimator_, pd.DataFrame(X_test))
    assert "final_model_mb" not in plain


@pytest.mark.parametrize("adaptive", [False, True])
def test_the_order_statistics_equal_sorting_every_candidate_bound(adaptive):
    # The bounds as the formula reads: the rank-th order statistic of the n
    # candidate bounds of each new row, here by sorting them all; with ties
    # (residuals rounded), zeros and bounds on both sides of 0.
    rng = np.random.default_rng(3)
    n, m, k = 203, 57, 5
    residuals = np.round(np.abs(rng.normal(size=n)), 1)
    residuals[:7] = 0.0
    folds = rng.permutation(np.arange(n) % k)
    predictions = rng.normal(scale=2.0, size=(k, m))
    scales = rng.uniform(0.0, 3.0, size=(k, m)) if adaptive else None
    scales_or_ones = np.ones((k, m)) if scales is None else scales
    for coverage in (0.5, 0.8, 0.9, 0.95):
        rank = conformal_rank(coverage, n)
        margins = residuals[:, None] * scales_or_ones[folds]
        lower = -np.sort(margins - predictions[folds], axis=0)[rank - 1]
        upper = np.sort(margins + predictions[folds], axis=0)[rank - 1]
        bounds = cv_plus_intervals(predictions, residuals, folds, coverage, scales)
        np.testing.assert_array_equal(bounds, np.column_stack([lower, upper]))


def test_fold_models_on_a_sample_of_their_rows_still_cover():
    fitted_rows = []

    class Counting(Ridge):
        def fit(self, X, y):
            fitted_rows.append(len(X))
            return super().fit(X, y)

    X, y, X_test, y_test = _regression(n_train=1000, n_test=2000, seed=4)
    model = CrossConformalRegressor(
        Counting(), np.arange(1000) % 5, train_fraction=0.25
    ).fit(X, y)
    # the final model on all 1,000 rows, each fold model on 200 of its 800
    assert fitted_rows == [1000] + [200] * 5
    bounds = model.predict_interval(X_test, 0.9)
    coverage = np.mean((bounds[:, 0] <= y_test) & (y_test <= bounds[:, 1]))
    assert 0.87 <= coverage <= 0.93
    labels, test_labels = (y > np.median(y)).astype(int), (y_test > np.median(y))
    classifier = CrossConformalClassifier(
        LogisticRegression(), np.arange(1000) % 5, train_fraction=0.25
    ).fit(X, labels)
    sets = classifier.predict_set(X_test, 0.9)
    assert 0.87 <= sets[np.arange(2000), test_labels.astype(int)].mean() <= 0.95


@pytest.mark.parametrize("coverage", [0.8, 0.9, 0.95])
def test_one_calibrating_fold_is_split_conformal_as_mapie_computes_it(coverage):
    X, y, X_test, _ = _regression(n_train=300)
    fold_ids = np.arange(300) % 5
    ours = CrossConformalRegressor(Ridge(), fold_ids, calibration_folds=[2]).fit(X, y)
    calibrating = fold_ids == 2
    # one fold model, fitted without fold 2; its 60 rows calibrate
    assert len(ours.fold_estimators_) == 1 and len(ours.residuals_) == 60
    fitted = Ridge().fit(X[~calibrating], y[~calibrating])
    mapie = SplitConformalRegressor(fitted, confidence_level=coverage, prefit=True)
    mapie.conformalize(X[calibrating], y[calibrating])
    _, mapie_bounds = mapie.predict_interval(X_test)
    bounds = ours.predict_interval(X_test, coverage)
    np.testing.assert_allclose(bounds, mapie_bounds[:, :, 0], rtol=1e-12)
    # by hand: the fold model's prediction -+ the ceil(coverage (m + 1))-th
    # smallest calibration residual (Lei et al. 2018, s.2.2)
    residuals = np.sort(np.abs(y[calibrating] - fitted.predict(X[calibrating])))
    q = residuals[math.ceil(coverage * 61 - 1e-9) - 1]
    centre = fitted.predict(X_test)
    np.testing.assert_allclose(bounds, np.column_stack([centre - q, centre + q]))
    # the final model is still fitted on every row
    np.testing.assert_allclose(ours.predict(X_test), Ridge().fit(X, y).predict(X_test))


def test_one_calibrating_fold_gives_split_conformal_sets_that_cover():
    X, y = make_classification(3000, 6, n_informative=4, n_classes=3, random_state=1)
    fold_ids = np.arange(1000) % 5
    model = CrossConformalClassifier(
        LogisticRegression(), fold_ids, calibration_folds=[0]
    ).fit(X[:1000], y[:1000])
    calibrating = fold_ids == 0
    fitted = LogisticRegression().fit(X[:1000][~calibrating], y[:1000][~calibrating])
    mapie = SplitConformalClassifier(fitted, confidence_level=0.9, prefit=True)
    mapie.conformalize(X[:1000][calibrating], y[:1000][calibrating])
    _, mapie_sets = mapie.predict_set(X[1000:])
    sets = model.predict_set(X[1000:], 0.9)
    # MAPIE's LAC threshold is the same order statistic of the same 200 scores
    np.testing.assert_array_equal(sets, mapie_sets[:, :, 0])
    assert sets[np.arange(2000), y[1000:]].mean() >= 0.87


def test_calibration_folds_must_name_folds_of_the_data():
    X, y, _, _ = _regression(n_train=100)
    for bad in ([7], []):
        with pytest.raises(ValueError, match=r"calibration_folds must name folds"):
            CrossConformalRegressor(
                Ridge(), np.arange(100) % 5, calibration_folds=bad
            ).fit(X, y)


def test_several_coverages_come_from_one_prediction_of_each_fold_model():
    calls = []

    class Counting(Ridge):
        def predict(self, X):
            calls.append(len(X))
            return super().predict(X)

    X, y, X_test, _ = _regression(n_train=200, n_test=50)
    model = CrossConformalRegressor(Counting(), np.arange(200) % 4).fit(X, y)
    calls.clear()
    both = model.predict_intervals(X_test, (0.8, 0.9))
    assert calls == [50] * 4  # once per fold model
    for coverage in (0.8, 0.9):
        np.testing.assert_array_equal(
            both[coverage], model.predict_interval(X_test, coverage)
        )
    labels = (y > np.median(y)).astype(int)
    classifier = CrossConformalClassifier(LogisticRegression(), np.arange(200) % 4)
    classifier.fit(X, labels)
    sets = classifier.predict_sets(X_test, (0.8, 0.95))
    for coverage in (0.8, 0.95):
        np.testing.assert_array_equal(
            sets[coverage], classifier.predict_set(X_test, coverage)
        )
