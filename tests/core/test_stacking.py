"""Stacking: a level-2 model on the members' out-of-fold predictions, kept
only where cross-validation on the search's folds says it beats their mean."""

import dataclasses

import numpy as np
import pandas as pd
import pytest
import skops.io
from sklearn.base import clone
from sklearn.datasets import load_diabetes, load_wine
from sklearn.frozen import FrozenEstimator
from sklearn.linear_model import LogisticRegression
from sklearn.tree import DecisionTreeClassifier

from ensemble_bo import EnsembleClassifier, EnsembleRegressor
from ensemble_bo.core.encoding import FeatureEncoding
from ensemble_bo.core.estimator import StackedClassifier, StackedRegressor
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.refit import ensemble_estimator
from ensemble_bo.core.results import EnsembleSearchResult
from ensemble_bo.core.stacking import (
    PROBABILITY_FLOOR,
    fitted_stack,
    stack_features,
)
from ensemble_bo.core.trials import TrialResult
from ensemble_bo.core.validation import InvalidInput, check_settings
from tests.support import cheap_parameters

N = 200
FOLDS = np.arange(N) % 5


def test_stack_features_are_predictions_or_floored_log_probabilities_by_member():
    np.testing.assert_array_equal(
        stack_features(np.array([[1.0, 2, 3], [4, 5, 6]])),
        [[1, 4], [2, 5], [3, 6]],
    )
    # members (2) x rows (2) x classes (2); a probability 0 is floored
    probabilities = np.array([[[1.0, 0.0], [0.5, 0.5]], [[0.2, 0.8], [0.9, 0.1]]])
    np.testing.assert_allclose(
        stack_features(probabilities),
        np.log(
            [
                [1.0, PROBABILITY_FLOOR, 0.2, 0.8],
                [0.5, 0.5, 0.9, 0.1],
            ]
        ),
    )
    with pytest.raises(ValueError, match=r"got shape \(3,\)"):
        stack_features(np.ones(3))


def search_result(outputs, target, objective, labels=None, weights=None):
    """A result whose pool holds `outputs` (one trial each), all in the ensemble."""
    pool = Pool(len(target), labels=labels)
    for i, output in enumerate(outputs):
        if labels is None:
            trial = TrialResult(output, 0.1)
        else:
            trial = TrialResult(output.argmax(axis=1), 0.1, oof_probabilities=output)
        pool.add({"i": i}, np.array([float(i)]), trial)
    return EnsembleSearchResult(
        pool=pool,
        members=list(range(len(outputs))),
        single_losses=np.zeros(len(outputs)),
        target=np.asarray(target),
        weights=weights,
        objective=objective,
    )


def test_a_linear_combination_the_mean_cannot_reach_is_found_and_chosen():
    rng = np.random.default_rng(0)
    y = rng.normal(size=N)
    # Both members shrink the target by half, one also shifted: their mean is
    # 0.5 y + 0.15, while 2 x the first member is y up to its noise.
    first = 0.5 * y + rng.normal(scale=0.01, size=N)
    second = 0.5 * y + 0.3
    stack = fitted_stack(search_result([first, second], y, "mse"), FOLDS)
    mean = (first + second) / 2
    assert stack.ensemble_cv_loss == pytest.approx(np.mean((mean - y) ** 2))
    assert stack.ensemble_cv_loss > 0.2
    assert stack.cv_loss < 0.01
    assert stack.chosen and stack.metric == "mse" and stack.members == (0, 1)
    assert stack.metrics() == {
        "stacking_cv_loss": stack.cv_loss,
        "stacking_ensemble_cv_loss": stack.ensemble_cv_loss,
        "stacking_chosen": 1.0,
    }


def test_the_plain_ensemble_is_kept_where_its_cv_loss_is_lower():
    rng = np.random.default_rng(1)
    y = rng.normal(size=N)
    # One member is the target itself: its mean has CV loss 0, which no
    # level-2 model fitted on 4/5 of the rows can beat.
    stack = fitted_stack(search_result([y.copy()], y, "mse"), FOLDS)
    assert stack.ensemble_cv_loss == 0.0 < stack.cv_loss
    assert not stack.chosen and stack.metrics()["stacking_chosen"] == 0.0


def test_inverted_class_probabilities_are_turned_around_by_the_logistic_stack():
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 2, size=N)
    # A confident member that is right on 90% of rows, and one that gives the
    # wrong class 0.8 on every row: the weighted mean (0.7 / 0.3) is hurt by
    # the second, a logistic model uses it reversed.
    right = np.where(rng.random(N) < 0.9, labels, 1 - labels)
    confident = np.eye(2)[right] * 0.9 + 0.05
    inverted = np.eye(2)[1 - labels] * 0.6 + 0.2
    result = search_result(
        [confident, inverted], labels, "log_loss", labels, weights={0: 0.7, 1: 0.3}
    )
    stack = fitted_stack(result, FOLDS)
    mean = 0.7 * confident + 0.3 * inverted
    by_hand = -np.log(mean[np.arange(N), labels]).mean()
    assert stack.metric == "log_loss"
    assert stack.ensemble_cv_loss == pytest.approx(by_hand)
    assert stack.chosen and stack.cv_loss < 0.5 * by_hand


def test_the_plain_ensemble_is_compared_as_its_voting_combines_it():
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 2, size=N)
    # soft: the mean probability of the true class is 0.6 on every row; hard:
    # the member votes for the true class, a vote share of 1
    member = np.eye(2)[labels] * 0.2 + 0.4
    result = search_result([member], labels, "error", labels)
    soft = fitted_stack(result, FOLDS, "soft")
    hard = fitted_stack(result, FOLDS, "hard")
    assert soft.metric == hard.metric == "error"
    assert soft.ensemble_cv_loss == hard.ensemble_cv_loss == 0.0
    result = search_result([member], labels, "log_loss", labels)
    assert fitted_stack(result, FOLDS, "soft").ensemble_cv_loss == pytest.approx(
        -np.log(0.6)
    )
    # hard votes as probabilities: the true class gets all of it
    assert fitted_stack(result, FOLDS, "hard").ensemble_cv_loss == pytest.approx(0.0)


def test_stacked_estimators_clone_with_their_fitted_combiner():
    X, y = load_wine(return_X_y=True)
    members = [("member_0", DecisionTreeClassifier(max_depth=2, random_state=0))]
    probabilities = DecisionTreeClassifier(max_depth=2, random_state=0).fit(X, y)
    combiner = FrozenEstimator(
        LogisticRegression(max_iter=1000).fit(
            stack_features(probabilities.predict_proba(X)[None]), y
        )
    )
    model = StackedClassifier(members, combiner=combiner)
    assert set(model.get_params(deep=False)) == {"estimators", "combiner"}
    copy = clone(model)
    assert copy.combiner is combiner  # frozen: cloned as it is, still fitted
    np.testing.assert_allclose(
        copy.fit(X, y).predict_proba(X), model.fit(X, y).predict_proba(X)
    )
    model.set_params(member_0__max_depth=3)
    assert model.estimators[0][1].max_depth == 3


def test_fold_ids_must_match_the_pool():
    y = np.arange(10.0)
    with pytest.raises(
        ValueError, match=r"each of the pool's 10 rows, got shape \(9,\)"
    ):
        fitted_stack(search_result([y], y, "mse"), np.arange(9) % 3)


def chosen(stack):
    """The same stack as if cross-validation had preferred it."""
    return dataclasses.replace(stack, cv_loss=0.0, ensemble_cv_loss=1.0)


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_the_api_stacks_and_a_stacked_model_round_trips_through_skops(task):
    if task == "regression":
        X, y = load_diabetes(return_X_y=True, as_frame=True)
        search = EnsembleRegressor(
            model="decision_tree_regressor", budget=5, cv=3, random_state=0
        )
    else:
        X, y = load_wine(return_X_y=True, as_frame=True)
        search = EnsembleClassifier(
            model="decision_tree_classifier", budget=5, cv=3, random_state=0
        )
    # numeric columns only: the search's feature encoding is the empty one
    search.set_params(params={"stacking": True}).fit(X, y)
    stack = search.stack_
    assert stack.members == tuple(sorted(search.result_.member_weights))
    # the model the search shipped: stacked if and only if it was chosen
    inner = search.ensemble_
    inner = inner.regressor_ if task == "regression" else inner
    stacked = (StackedRegressor, StackedClassifier)
    assert isinstance(inner.named_steps["ensemble"], stacked) == stack.chosen

    model = ensemble_estimator(
        search.result_, FeatureEncoding(), "auto", 0, stack=chosen(stack)
    )
    model.fit(X, y)
    inner = model.regressor_ if task == "regression" else model
    ensemble = inner.named_steps["ensemble"]
    assert isinstance(ensemble, stacked)
    encoded = inner.named_steps["encode"].transform(X)
    if task == "regression":
        members = np.stack([m.predict(encoded) for m in ensemble.estimators_])
        expected = stack.combiner.predict(stack_features(members))
        np.testing.assert_allclose(
            model.predict(X),
            model.transformer_.inverse_transform(expected[:, None]).ravel(),
        )
    else:
        members = np.stack([m.predict_proba(encoded) for m in ensemble.estimators_])
        proba = stack.combiner.predict_proba(stack_features(members))
        np.testing.assert_allclose(model.predict_proba(X), proba)
        np.testing.assert_array_equal(model.predict(X), model.classes_[proba.argmax(1)])
    dumped = skops.io.dumps(model)
    loaded = skops.io.loads(dumped, trusted=skops.io.get_untrusted_types(data=dumped))
    np.testing.assert_array_equal(loaded.predict(X), model.predict(X))


@pytest.mark.parametrize("value", ["yes", None, 1])
def test_a_bad_stacking_value_is_refused_naming_it(value):
    parameters = cheap_parameters() | {"stacking": value}
    with pytest.raises(InvalidInput, match=rf"stacking={value!r} is not true or false"):
        check_settings("segor", parameters)
    with pytest.raises(ValueError, match=rf"stacking={value!r} is not true or false"):
        EnsembleRegressor(budget=2, params={"stacking": value}).fit(
            pd.DataFrame({"x": np.arange(20.0)}), np.arange(20.0)
        )
