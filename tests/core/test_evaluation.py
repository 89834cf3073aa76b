import numpy as np
import pytest
from sklearn.tree import DecisionTreeRegressor

from ensemble_bo.core.evaluation import CrossValidationEvaluator

RNG = np.random.default_rng(0)
X = RNG.normal(size=(50, 3))
Y = X[:, 0] + 0.1 * RNG.normal(size=50)
FOLDS = np.arange(50) % 5


def test_out_of_fold_predictions_equal_manual_cross_validation():
    result = CrossValidationEvaluator(
        "decision_tree_regressor", X, Y, FOLDS, random_state=3
    )({"max_depth": 3})
    assert result.ok and result.fit_seconds > 0
    expected = np.empty(50)
    for k in range(5):
        train, test = FOLDS != k, FOLDS == k
        model = DecisionTreeRegressor(max_depth=3, random_state=3).fit(
            X[train], Y[train]
        )
        expected[test] = model.predict(X[test])
    np.testing.assert_array_equal(result.oof_predictions, expected)


def test_a_model_that_fails_to_train_is_a_failed_trial():
    result = CrossValidationEvaluator("decision_tree_regressor", X, Y, FOLDS)(
        {"max_depth": -2}
    )
    assert not result.ok and result.oof_predictions is None
    assert "max_depth" in result.error and result.error.startswith(
        "InvalidParameterError"
    )


def test_unknown_algorithm_is_an_error_before_any_training():
    with pytest.raises(
        ValueError,
        match="unknown algorithm 'boosted_tree'; available: \\['decision_tree_regressor', 'elastic_net'",
    ):
        CrossValidationEvaluator("boosted_tree", X, Y, FOLDS)
