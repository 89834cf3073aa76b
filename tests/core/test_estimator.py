"""EnsembleRegressor, EnsembleClassifier and build_ensemble_model.

Both ensembles pass every check of sklearn's `parametrize_with_checks` (hard and
soft voting alike), so no check is listed in `expected_failed_checks`. The only
checks not run are the array-API ones, which sklearn itself skips unless the
SCIPY_ARRAY_API environment variable is set.
"""

import pickle

import numpy as np
import pandas as pd
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.compose import TransformedTargetRegressor
from sklearn.dummy import DummyClassifier, DummyRegressor
from sklearn.linear_model import LinearRegression, LogisticRegression
from sklearn.pipeline import Pipeline
from sklearn.svm import SVC
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor
from sklearn.utils.estimator_checks import parametrize_with_checks

from ensemble_bo.core.estimator import (
    EnsembleClassifier,
    EnsembleRegressor,
    build_ensemble_model,
)
from ensemble_bo.core.preparation import make_feature_encoder


def _regressor(weights=(0.3, 0.7)):
    return EnsembleRegressor(
        [
            ("tree", DecisionTreeRegressor(max_depth=3, random_state=0)),
            ("linear", LinearRegression()),
        ],
        weights=list(weights),
    )


def _classifier(voting="hard", weights=(0.3, 0.7)):
    return EnsembleClassifier(
        [
            ("tree", DecisionTreeClassifier(max_depth=3, random_state=0)),
            ("logistic", LogisticRegression()),
        ],
        weights=list(weights),
        voting=voting,
    )


def _constant_classifier(encoded_label):
    # Members are fitted on labels encoded as 0..n_classes-1, so constants are codes.
    return DummyClassifier(strategy="constant", constant=encoded_label)


@parametrize_with_checks([_regressor(), _classifier("hard"), _classifier("soft")])
@pytest.mark.filterwarnings(
    # sklearn's type_of_target casts NaN labels before it rejects them.
    "ignore:invalid value encountered in cast:RuntimeWarning"
)
def test_sklearn_estimator_checks(estimator, check):
    check(estimator)


# --- hand-computed predictions ---------------------------------------------------


def test_regressor_is_the_weighted_mean_of_its_members():
    X = np.zeros((3, 2))
    model = EnsembleRegressor(
        [
            ("high", DummyRegressor(strategy="constant", constant=10.0)),
            ("low", DummyRegressor(strategy="constant", constant=-2.0)),
        ],
        weights=[3, 1],
    ).fit(X, np.arange(3.0))
    np.testing.assert_allclose(model.weights_, [0.75, 0.25])
    prediction = model.predict(X)
    assert prediction.shape == (3,)
    np.testing.assert_allclose(prediction, 0.75 * 10.0 + 0.25 * -2.0)


def test_regressor_without_weights_weighs_members_equally():
    X = np.zeros((2, 1))
    model = EnsembleRegressor(
        [
            ("a", DummyRegressor(strategy="constant", constant=1.0)),
            ("b", DummyRegressor(strategy="constant", constant=2.0)),
            ("c", DummyRegressor(strategy="constant", constant=6.0)),
        ]
    ).fit(X, [0.0, 1.0])
    np.testing.assert_allclose(model.predict(X), [3.0, 3.0])


def test_the_same_configuration_may_be_a_member_twice():
    X = np.arange(8.0).reshape(-1, 1)
    y = X.ravel() ** 2
    tree = DecisionTreeRegressor(max_depth=2, random_state=0)
    twice = EnsembleRegressor([("a", tree), ("b", tree)], weights=[0.5, 0.5])
    np.testing.assert_allclose(twice.fit(X, y).predict(X), tree.fit(X, y).predict(X))


def test_weights_overturn_a_two_to_one_majority():
    X = np.zeros((4, 1))
    y = ["no", "yes", "no", "yes"]
    members = [
        ("no_1", _constant_classifier(0)),
        ("no_2", _constant_classifier(0)),
        ("yes", _constant_classifier(1)),
    ]
    equal = EnsembleClassifier(members).fit(X, y)
    assert equal.predict(X[:1]).tolist() == ["no"]
    np.testing.assert_allclose(equal.predict_proba(X[:1]), [[2 / 3, 1 / 3]])

    weighted = EnsembleClassifier(members, weights=[0.2, 0.2, 0.6]).fit(X, y)
    assert weighted.predict(X[:1]).tolist() == ["yes"]
    # Hard voting's predict_proba gives the vote shares.
    np.testing.assert_allclose(weighted.predict_proba(X[:1]), [[0.4, 0.6]])


def test_soft_voting_averages_known_member_probabilities():
    X = np.zeros((4, 1))
    y = ["a", "a", "a", "b"]  # prior: P(a) = 0.75, P(b) = 0.25
    model = EnsembleClassifier(
        [
            ("prior", DummyClassifier(strategy="prior")),
            ("always_b", _constant_classifier(1)),  # one-hot probability [0, 1]
        ],
        weights=[0.4, 0.6],
        voting="soft",
    ).fit(X, y)
    expected = 0.4 * np.array([0.75, 0.25]) + 0.6 * np.array([0.0, 1.0])
    np.testing.assert_allclose(model.predict_proba(X[:2]), [expected, expected])
    assert model.predict(X[:1]).tolist() == ["b"]
    # Hard voting on the same members: the prior member votes for its majority "a".
    hard = EnsembleClassifier(model.estimators, weights=[0.4, 0.6]).fit(X, y)
    np.testing.assert_allclose(hard.predict_proba(X[:1]), [[0.4, 0.6]])


def test_ties_go_to_the_lowest_class_index():
    X = np.zeros((3, 1))
    y = ["a", "b", "c"]
    three_way = EnsembleClassifier(
        [("c", _constant_classifier(2)), ("b", _constant_classifier(1))]
    ).fit(X, y)
    assert three_way.predict(X[:1]).tolist() == ["b"]

    # 0.1 + 0.2 > 0.3 in floats, but the vote is a tie and must go to "a".
    members = [
        ("b_1", _constant_classifier(1)),
        ("b_2", _constant_classifier(1)),
        ("a", _constant_classifier(0)),
    ]
    weights = [0.1, 0.2, 0.3]
    model = EnsembleClassifier(members, weights=weights).fit(X, y)
    shares = model.predict_proba(X[:1])[0]
    assert shares[1] >= shares[0]  # the float sums alone would pick "b"
    assert model.predict(X[:1]).tolist() == ["a"]

    soft = EnsembleClassifier(
        [("a", _constant_classifier(0)), ("c", _constant_classifier(2))],
        voting="soft",
    ).fit(X, y)
    assert soft.predict(X[:1]).tolist() == ["a"]


def test_string_labels_come_back_as_strings():
    X = np.array([[0.0], [1.0], [2.0], [3.0], [4.0], [5.0]])
    y = np.array(["cat", "cat", "cat", "dog", "dog", "dog"])
    for voting in ("hard", "soft"):
        model = _classifier(voting).fit(X, y)
        assert model.classes_.tolist() == ["cat", "dog"]
        predictions = model.predict(X)
        assert predictions.dtype == y.dtype
        assert predictions.tolist() == y.tolist()


class _NeverSeesTheLastClass(ClassifierMixin, BaseEstimator):
    """Prior classifier that drops the rows of the highest label before fitting."""

    def fit(self, X, y):
        y = np.asarray(y)
        keep = y != y.max()
        self.model_ = DummyClassifier(strategy="prior").fit(X[keep], y[keep])
        self.classes_ = self.model_.classes_
        return self

    def predict(self, X):
        return self.model_.predict(X)

    def predict_proba(self, X):
        return self.model_.predict_proba(X)


def test_soft_voting_aligns_members_that_missed_a_class():
    X = np.zeros((4, 1))
    y = ["x", "y", "y", "z"]  # the odd member sees x, y, y: P = [1/3, 2/3]
    model = EnsembleClassifier(
        [("partial", _NeverSeesTheLastClass()), ("always_z", _constant_classifier(2))],
        voting="soft",
    ).fit(X, y)
    assert model.estimators_[0].classes_.tolist() == [0, 1]
    np.testing.assert_allclose(model.predict_proba(X[:1]), [[1 / 6, 1 / 3, 1 / 2]])
    assert model.predict(X[:1]).tolist() == ["z"]


# --- sklearn plumbing --------------------------------------------------------------


@pytest.mark.parametrize(
    "model", [_regressor(), _classifier("hard"), _classifier("soft")]
)
def test_pickle_round_trip_predicts_the_same(model):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    y = X[:, 0] + X[:, 1] if isinstance(model, EnsembleRegressor) else X[:, 0] > 0
    model.fit(X, y)
    restored = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(restored.predict(X), model.predict(X))
    if hasattr(model, "predict_proba"):
        np.testing.assert_array_equal(restored.predict_proba(X), model.predict_proba(X))


def test_nested_member_params_can_be_read_and_set():
    model = _regressor()
    params = model.get_params()
    assert params["tree__max_depth"] == 3
    assert params["weights"] == [0.3, 0.7]
    assert isinstance(params["linear"], LinearRegression)

    model.set_params(tree__max_depth=5, linear=DummyRegressor(), weights=[1, 1])
    assert model.get_params()["tree__max_depth"] == 5
    assert isinstance(model.estimators[1][1], DummyRegressor)
    assert model.weights == [1, 1]

    classifier = _classifier().set_params(voting="soft", logistic__C=0.5)
    assert classifier.get_params()["logistic__C"] == 0.5
    assert classifier.voting == "soft"


def test_feature_names_are_recorded_from_frames():
    X = pd.DataFrame({"u": [0.0, 1.0, 2.0, 3.0], "v": [1.0, 0.0, 1.0, 0.0]})
    model = _regressor().fit(X, [0.0, 1.0, 2.0, 3.0])
    assert model.n_features_in_ == 2
    assert model.feature_names_in_.tolist() == ["u", "v"]


# --- bad input -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("estimators", "weights", "match"),
    [
        ([], None, r"non-empty list .* got \[\]"),
        (
            [("a", DummyRegressor()), ("b", DummyRegressor())],
            [1.0],
            r"got 2 estimators and 1 weights \[1\.0\]",
        ),
        (
            [("a", DummyRegressor()), ("b", DummyRegressor())],
            [1.0, -0.5],
            r"non-negative, got -0\.5",
        ),
        (
            [("a", DummyRegressor()), ("b", DummyRegressor())],
            [1.0, float("nan")],
            r"finite and non-negative, got nan",
        ),
        (
            [("a", DummyRegressor()), ("b", DummyRegressor())],
            [0, 0.0],
            r"must not all be zero, got \[0, 0\.0\]",
        ),
        (
            [("a", DummyRegressor()), ("a", DummyRegressor())],
            None,
            r"unique, got duplicates \['a'\]",
        ),
        ([("weights", DummyRegressor())], None, r"parameter name, got \['weights'\]"),
        ([("a__b", DummyRegressor())], None, r"contain '__'.*got \['a__b'\]"),
        ([("a", DummyRegressor)], None, r"estimator 'a' must be an estimator instance"),
    ],
)
def test_bad_ensemble_parameters_are_named(estimators, weights, match):
    with pytest.raises(ValueError, match=match):
        EnsembleRegressor(estimators, weights=weights).fit(np.zeros((2, 1)), [0, 1])


def test_unknown_voting_is_named():
    with pytest.raises(ValueError, match=r"voting must be one of .* got 'mean'"):
        _classifier(voting="mean").fit(np.zeros((2, 1)), [0, 1])


def test_soft_voting_names_the_member_without_predict_proba():
    model = EnsembleClassifier(
        [("tree", DecisionTreeClassifier()), ("svm", SVC())], voting="soft"
    )
    with pytest.raises(ValueError, match=r"estimator\(s\) \['svm'\] lack"):
        model.fit(np.zeros((2, 1)), [0, 1])


def test_classifier_rejects_a_continuous_target():
    with pytest.raises(ValueError, match="Unknown label type: continuous"):
        _classifier().fit(np.zeros((3, 1)), [0.5, 1.5, 2.25])


def test_builder_names_an_unknown_task_and_mismatched_weights():
    with pytest.raises(ValueError, match="unknown task 'ranking'"):
        build_ensemble_model("ranking", [DummyRegressor()], [1.0], [])
    with pytest.raises(ValueError, match="got 2 members and 1 weights"):
        build_ensemble_model(
            "regression", [DummyRegressor(), DummyRegressor()], [1.0], []
        )


# --- build_ensemble_model on raw frames ------------------------------------------


def _frame(n=30, seed=0):
    rng = np.random.default_rng(seed)
    colour = rng.choice(["red", "green", "blue"], size=n)
    x = rng.normal(size=n)
    features = pd.DataFrame({"x": x, "colour": colour})
    effect = pd.Series(colour).map({"red": 3.0, "green": -1.0, "blue": 0.5})
    return features, 100.0 + 20.0 * x + 10.0 * effect.to_numpy()


def test_regression_model_predicts_in_the_targets_units():
    features, target = _frame()
    model = build_ensemble_model(
        "regression",
        [LinearRegression(), DecisionTreeRegressor(max_depth=3, random_state=0)],
        [0.25, 0.75],
        categorical=["colour"],
    )
    assert isinstance(model, TransformedTargetRegressor)
    model.fit(features, target)

    def direct(member):
        # The same member fitted on the raw target, without standardization.
        return (
            Pipeline([("encode", make_feature_encoder(["colour"])), ("m", member)])
            .fit(features, target)
            .predict(features)
        )

    expected = 0.25 * direct(LinearRegression()) + 0.75 * direct(
        DecisionTreeRegressor(max_depth=3, random_state=0)
    )
    np.testing.assert_allclose(model.predict(features), expected)

    unseen = pd.DataFrame({"x": [0.0], "colour": ["purple"]})  # all-zero, not an error
    assert np.isfinite(model.predict(unseen)).all()


def test_regression_builder_standardizes_the_target():
    features = pd.DataFrame(
        {"x": [1.0, 2.0, 3.0, 4.0], "colour": ["red", "blue", "red", "green"]}
    )
    target = pd.Series([10.0, 20.0, 30.0, 40.0])  # mean 25, population std sqrt(125)
    model = build_ensemble_model(
        "regression",
        [
            DummyRegressor(strategy="constant", constant=1.0),
            DummyRegressor(strategy="constant", constant=-1.0),
        ],
        [0.75, 0.25],
        categorical=["colour"],
    ).fit(features, target)
    # members predict +1 and -1 standardized; 0.75 * 1 + 0.25 * -1 = 0.5
    np.testing.assert_allclose(
        model.predict(features.iloc[:1]), [25.0 + 0.5 * np.sqrt(125.0)]
    )


@pytest.mark.parametrize("voting", ["hard", "soft"])
def test_classification_model_on_a_frame_with_a_categorical_column(voting):
    features, score = _frame(n=40, seed=1)
    labels = np.where(score > np.median(score), "high", "low")
    model = build_ensemble_model(
        "classification",
        [DecisionTreeClassifier(max_depth=3, random_state=0)],
        [1.0],
        categorical=["colour"],
        voting=voting,
    )
    assert isinstance(model, Pipeline)
    assert model.named_steps["ensemble"].voting == voting
    model.fit(features, labels)

    direct = Pipeline(
        [
            ("encode", make_feature_encoder(["colour"])),
            ("tree", DecisionTreeClassifier(max_depth=3, random_state=0)),
        ]
    ).fit(features, labels)
    np.testing.assert_array_equal(model.predict(features), direct.predict(features))
    if voting == "soft":
        expected = direct.predict_proba(features)
    else:  # a single member gets the whole vote for its prediction
        expected = direct.predict(features)[:, None] == model.classes_[None, :]
    np.testing.assert_allclose(model.predict_proba(features), expected.astype(float))
    assert model.classes_.tolist() == ["high", "low"]


def test_classification_builder_combines_several_members():
    features, score = _frame(n=40, seed=2)
    labels = np.where(score > np.median(score), "high", "low")
    model = build_ensemble_model(
        "classification",
        [DecisionTreeClassifier(max_depth=2, random_state=0), LogisticRegression()],
        [0.5, 0.5],
        categorical=["colour"],
        voting="soft",
    ).fit(features, labels)
    proba = model.predict_proba(features)
    assert proba.shape == (40, 2)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    assert set(model.predict(features)) <= {"high", "low"}
