import numpy as np
import pandas as pd
import pytest
from sklearn.dummy import DummyRegressor

from ensemble_bo.core.estimator import build_regression_ensemble


def test_weighted_mean_of_members_in_the_targets_units():
    features = pd.DataFrame(
        {"x": [1.0, 2.0, 3.0, 4.0], "colour": ["red", "blue", "red", "green"]}
    )
    target = pd.Series([10.0, 20.0, 30.0, 40.0])  # mean 25, population std sqrt(125)
    model = build_regression_ensemble(
        [
            DummyRegressor(strategy="constant", constant=1.0),
            DummyRegressor(strategy="constant", constant=-1.0),
        ],
        [0.75, 0.25],
        categorical=["colour"],
    ).fit(features, target)
    # members predict +1 and -1 standardized; 0.75 * 1 + 0.25 * -1 = 0.5 -> 25 + 0.5 * std
    expected = 25.0 + 0.5 * np.sqrt(125.0)
    new = pd.DataFrame(
        {"x": [9.0], "colour": ["purple"]}
    )  # unseen category is all-zero, not an error
    np.testing.assert_allclose(model.predict(new), [expected])


def test_members_and_weights_must_match():
    with pytest.raises(
        ValueError, match="need one weight per member, got 2 members and 1 weights"
    ):
        build_regression_ensemble([DummyRegressor(), DummyRegressor()], [1.0], [])
