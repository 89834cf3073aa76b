import math

import numpy as np
import pytest
from sklearn.ensemble import RandomForestRegressor

from ensemble_bo.core.random_forest import (
    VARIANCE_FLOOR,
    log_scaled,
    predictive_mean_and_std,
)


def test_targets_are_log_scaled_as_smac3_by_hand():
    # 5th percentile of (1, 2, 3, 5): 1 + 0.15 * (2 - 1) = 1.15, so the log's zero
    # sits 0.15 below the best: at 0.85 (less 1e-10 of the range, 4).
    targets = log_scaled(np.array([3.0, 1.0, 5.0, 2.0]))
    expected = [
        math.log(2.15 / 4.15),
        math.log(0.15 / 4.15),
        0.0,
        math.log(1.15 / 4.15),
    ]
    np.testing.assert_allclose(targets, expected, rtol=1e-8, atol=1e-12)
    # unit-free: the same targets for the values in other units
    np.testing.assert_allclose(
        log_scaled(np.array([3.0, 1.0, 5.0, 2.0]) * 1e6 - 7.0), expected, rtol=1e-8
    )
    # a tied best stays finite, 1e-10 of the range above the zero
    tied = log_scaled(np.array([2.0, 2.0, 5.0]))
    assert tied[:2] == pytest.approx([math.log(1e-10)] * 2, rel=1e-6)
    # values all equal: nothing to rank, and no division by zero
    np.testing.assert_array_equal(log_scaled(np.full(4, 0.7)), np.zeros(4))
    np.testing.assert_array_equal(log_scaled(np.array([3.0])), np.zeros(1))


def test_predictive_mean_and_variance_are_those_across_the_trees():
    rng = np.random.default_rng(0)
    X, y = rng.random((30, 2)), rng.random(30)
    forest = RandomForestRegressor(7, random_state=4).fit(X, y)
    points = rng.random((50, 2))
    mean, std = predictive_mean_and_std(forest, points)
    per_tree = np.array([tree.predict(points) for tree in forest.estimators_])
    np.testing.assert_allclose(mean, forest.predict(points), rtol=1e-12)
    np.testing.assert_allclose(std**2, per_tree.var(axis=0), rtol=1e-10)
    assert per_tree.var(axis=0).min() > VARIANCE_FLOOR  # the floor did not act
    # where every tree agrees the variance is floored, not 0
    flat = RandomForestRegressor(7, random_state=4).fit(X, np.ones(30))
    np.testing.assert_array_equal(
        predictive_mean_and_std(flat, points)[1], math.sqrt(VARIANCE_FLOOR)
    )
