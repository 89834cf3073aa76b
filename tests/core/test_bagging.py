"""Bagged members: the mean of the fold models cross-validation fitted."""

import numpy as np
import pandas as pd
import pytest
import skops.io
from sklearn.base import BaseEstimator, ClassifierMixin, clone
from sklearn.dummy import DummyClassifier, DummyRegressor
from sklearn.tree import DecisionTreeRegressor

from ensemble_bo import EnsembleClassifier, EnsembleRegressor
from ensemble_bo.core.bagging import BaggedClassifier, BaggedRegressor, bagged
from ensemble_bo.core.evaluation import CrossValidation
from ensemble_bo.core.methods import run_method
from ensemble_bo.core.preparation import make_model_input
from ensemble_bo.core.refit import bagging_folds, ensemble_estimator
from ensemble_bo.core.seeding import derive_seed
from ensemble_bo.core.trials import TrialRequest
from ensemble_bo.core.validation import InvalidInput, check_settings
from tests.support import cheap_parameters

X6 = np.arange(6.0).reshape(-1, 1)


def test_a_bagged_regressor_predicts_the_mean_of_its_fold_models():
    # Folds of 1, 2 and 3 rows; each fold model predicts the mean of the rows
    # outside its fold: fold 0 -> mean(0,0,0,0,0) = 0, fold 1 -> mean(6,0,0,0)
    # = 1.5, fold 2 -> mean(6,0,0) = 2; bagged: (0 + 1.5 + 2) / 3 = 7/6, where
    # the refit mean of all six rows is 1.
    y = np.array([6.0, 0, 0, 0, 0, 0])
    member = BaggedRegressor(DummyRegressor(), np.array([0, 1, 1, 2, 2, 2])).fit(X6, y)
    assert [model.constant_[0][0] for model in member.estimators_] == [0, 1.5, 2]
    np.testing.assert_allclose(member.predict(X6[:2]), [7 / 6, 7 / 6])
    assert member.folds_.tolist() == [0, 1, 2] and member.n_features_in_ == 1


def test_a_bagged_classifier_averages_probabilities_a_fold_model_never_saw_as_0():
    # Class frequencies outside each fold: fold 0 (rows 2-5: a a b b) -> [.5, .5],
    # fold 1 (rows 0, 1, 4, 5: a a b b) -> [.5, .5], fold 2 (rows 0-3: a a a a)
    # saw only "a" -> [1, 0]. Mean: [2/3, 1/3].
    y = np.array(["a", "a", "a", "a", "b", "b"])
    member = BaggedClassifier(
        DummyClassifier(strategy="prior"), np.array([0, 0, 1, 1, 2, 2])
    ).fit(X6, y)
    np.testing.assert_allclose(member.predict_proba(X6[:1]), [[2 / 3, 1 / 3]])
    assert member.predict(X6[:1]).tolist() == ["a"]
    assert member.classes_.tolist() == ["a", "b"]


class _MajorityLabel(ClassifierMixin, BaseEstimator):
    """Predicts its training rows' most frequent code (ties: the lowest); no
    predict_proba, like an SVC without Platt scaling."""

    def fit(self, X, y):
        self.classes_ = np.unique(y)
        self.label_ = np.argmax(np.bincount(y))
        return self

    def predict(self, X):
        return np.full(len(X), self.label_)


def test_fold_models_without_predict_proba_give_their_vote_shares():
    # outside fold 0: a a a b -> a; outside 1: b b a b -> b; outside 2: b b a a -> a
    y = np.array(["b", "b", "a", "a", "a", "b"])
    member = bagged(_MajorityLabel(), np.array([0, 0, 1, 1, 2, 2])).fit(X6, y)
    assert isinstance(member, BaggedClassifier)
    np.testing.assert_allclose(member.predict_proba(X6[:1]), [[2 / 3, 1 / 3]])
    assert member.predict(X6[:1]).tolist() == ["a"]


@pytest.mark.parametrize(
    ("fold_ids", "message"),
    [
        (np.zeros(6, dtype=int), r"at least two folds, got \[0\]"),
        (np.array([0, 1, 0, 1]), r"fold of each of the 6 rows, got shape \(4,\)"),
    ],
)
def test_bad_folds_are_refused_naming_them(fold_ids, message):
    with pytest.raises(ValueError, match=message):
        BaggedRegressor(DummyRegressor(), fold_ids).fit(X6, np.arange(6.0))


def test_a_bagged_classifier_refuses_a_regressor():
    with pytest.raises(ValueError, match="needs a classifier, got DummyRegressor"):
        BaggedClassifier(DummyRegressor(), np.arange(6) % 2).fit(X6, np.arange(6) % 2)


def test_get_params_reaches_the_fold_models_estimator_and_clone_keeps_the_folds():
    member = bagged(DecisionTreeRegressor(max_depth=2), np.arange(6) % 3)
    assert member.get_params()["estimator__max_depth"] == 2
    copy = clone(member.set_params(estimator__max_depth=3))
    assert copy.estimator.max_depth == 3 and copy.fold_ids.tolist() == [0, 1, 2] * 2


# --- the bagged final model of a real search ------------------------------------

RNG = np.random.default_rng(3)
FEATURES = pd.DataFrame(RNG.normal(size=(80, 3)), columns=["x0", "x1", "x2"]).assign(
    colour=RNG.choice(["red", "green", "blue"], size=80)
)
VALUES = pd.Series(2.0 * FEATURES.x0 + (FEATURES.colour == "red") + RNG.normal(size=80))
LABELS = pd.Series(np.where(FEATURES.x0 + RNG.normal(size=80) > 0, "yes", "no"))
FOLDS = np.arange(80) % 4
SETTINGS = {
    "regression": ("segor", "decision_tree_regressor", VALUES),
    "classification": ("sego", "decision_tree_classifier", LABELS),
}


def _search(task):
    method, model, target = SETTINGS[task]
    info = {"name": "toy", "task": task, "categorical_columns": ["colour"]}
    data = make_model_input(FEATURES, target, info, FOLDS)
    settings = cheap_parameters() | {"budget": 5}
    settings[method] = {**settings[method], "model": model, "time_limit": None}
    settings[method]["optimizer"] = {**settings[method]["optimizer"], "n_initial": 3}
    return data, run_method(method, data, settings, 7)


@pytest.mark.parametrize("task", ["regression", "classification"])
def test_the_fold_models_reproduce_the_pools_out_of_fold_predictions(task):
    data, result = _search(task)
    model = ensemble_estimator(
        result, data.encoding, "soft", 7, fold_ids=bagging_folds("bagged", data)
    )
    model.fit(FEATURES, SETTINGS[task][2])
    pipeline = model.regressor_ if task == "regression" else model
    encoded = pipeline.named_steps["encode"].transform(FEATURES)
    members = pipeline.named_steps["ensemble"].estimators_
    assert len(members) == len(result.member_weights)
    for member, trial in zip(members, result.member_weights):
        assert len(member.estimators_) == 4
        predictions = np.empty(len(FEATURES))
        for fold, fold_model in zip(member.folds_, member.estimators_):
            rows = FOLDS == fold
            predictions[rows] = fold_model.predict(encoded[rows])
        np.testing.assert_allclose(predictions, result.pool.predictions[trial])
        # ... and one trial evaluated again by cross-validation gives the same
        config = result.pool.configs[trial]
        again = CrossValidation(
            result.model_name,
            data.features,
            data.target,
            data.fold_ids,
            derive_seed(7, "models"),
        )(TrialRequest(0, config))
        np.testing.assert_allclose(again.oof_predictions, predictions)
        if task == "classification":
            np.testing.assert_allclose(
                member.predict_proba(encoded),
                np.mean([m.predict_proba(encoded) for m in member.estimators_], 0),
            )


def test_the_bagged_ensemble_round_trips_through_skops_with_its_own_types_trusted():
    data, result = _search("classification")
    model = ensemble_estimator(
        result, data.encoding, "soft", 7, fold_ids=data.fold_ids
    ).fit(FEATURES, LABELS)
    dumped = skops.io.dumps(model)
    trusted = skops.io.get_untrusted_types(data=dumped)
    assert "ensemble_bo.core.bagging.BaggedClassifier" in trusted
    loaded = skops.io.loads(dumped, trusted=trusted)
    np.testing.assert_array_equal(
        loaded.predict_proba(FEATURES), model.predict_proba(FEATURES)
    )


def test_the_api_fits_a_bagged_ensemble_and_refuses_a_bad_final_model():
    params = {
        "final_model": "bagged",
        "sego": {"optimizer": {"n_initial": 3}, "time_limit": None},
    }
    search = EnsembleClassifier(
        model="decision_tree_classifier",
        budget=4,
        cv=3,
        random_state=1,
        params=params,
    ).fit(FEATURES, LABELS)
    ensemble = search.ensemble_.named_steps["ensemble"]
    assert all(isinstance(m, BaggedClassifier) for m in ensemble.estimators_)
    assert all(len(m.estimators_) == 3 for m in ensemble.estimators_)
    with pytest.raises(ValueError, match=r"final_model='bag' is not one of"):
        EnsembleRegressor(budget=2, params={"final_model": "bag"}).fit(FEATURES, VALUES)


@pytest.mark.parametrize("value", ["bag", None, 1])
def test_a_bad_final_model_is_refused_naming_the_value_and_the_choices(value):
    parameters = cheap_parameters() | {"final_model": value}
    with pytest.raises(InvalidInput, match=rf"final_model={value!r} is not one of "):
        check_settings("segor", parameters)
