"""Probabilities in the pool and the classification objectives.

Every oracle here is computed independently of the code under test: by hand,
by scikit-learn (log_loss, brier_score_loss, roc_auc_score, cross_val_predict)
or by a literal brute-force loop over the ensemble's members.
"""

import math
import pickle
import warnings

import numpy as np
import pandas as pd
import pytest
from sklearn.base import clone
from sklearn.datasets import load_breast_cancer, load_iris
from sklearn.exceptions import UndefinedMetricWarning
from sklearn.linear_model import LogisticRegression
from sklearn.metrics import brier_score_loss, log_loss, roc_auc_score
from sklearn.model_selection import PredefinedSplit, cross_val_predict
from sklearn.neighbors import KNeighborsClassifier
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from sklearn.svm import SVC
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from ensemble_bo.core.conformal import expected_calibration_error
from ensemble_bo.core.estimator import WeightedVoteClassifier
from ensemble_bo.core.evaluation import out_of_fold_predictions
from ensemble_bo.core.losses import (
    CLASSIFICATION_OBJECTIVES,
    HUBER_C,
    LOG_LOSS_EPS,
    brier_loss,
    cv_loss_of_mean_ensembles,
    fold_weights,
    log_loss_of_mean_ensembles,
    log_loss_of_true_class,
    margin_loss,
    objective,
)
from ensemble_bo.core.optimizer import RandomSearch
from ensemble_bo.core.pool import Pool
from ensemble_bo.core.refit import classification_test_metrics
from ensemble_bo.core.results import EnsembleSearchResult
from ensemble_bo.core.search import Search
from ensemble_bo.core.selection.stages import (
    agnostic_bayes_selection,
    posthoc_selection,
)
from ensemble_bo.core.space import SearchSpace
from ensemble_bo.core.strategies import PoolScorer, SlotEnsemble
from ensemble_bo.core.trials import TrialResult
from tests.support import RecordingRetargets, esmbo_search, from_config, sego_search

K = 3
CLASSES = list(range(K))
N = 12
LABELS = np.arange(N) % K
# Four folds of three samples, each holding every class: equal folds, so the
# CV loss (the mean of the fold means) is the plain mean over the samples.
FOLDS = np.arange(N) // 3
SPACE = SearchSpace.from_dict({"a": {"type": "float", "low": 0.0, "high": 1.0}})


def one_hot(codes, k=K):
    codes = np.asarray(codes, dtype=int)
    out = np.zeros((len(codes), k))
    for i, code in enumerate(codes):
        out[i, code] = 1.0
    return out


# --- per-sample losses ------------------------------------------------------------


def test_log_loss_of_the_true_class_by_hand():
    p = np.array([1.0, 0.5, 0.25, 0.0, 1.0 + 1e-15])
    expected = [0.0, math.log(2), math.log(4), 36.04365338911715, 0.0]
    np.testing.assert_allclose(log_loss_of_true_class(p - 1.0), expected, rtol=1e-12)
    # A zero probability costs -log(eps), not infinity; p > 1 from rounding costs 0.
    assert LOG_LOSS_EPS == np.finfo(float).eps
    assert log_loss_of_true_class(np.array([-1.0]))[0] == pytest.approx(
        -math.log(np.finfo(float).eps)
    )
    assert log_loss_of_true_class(np.array([1e-15]))[0] == 0.0
    # any shape
    assert log_loss_of_true_class(np.zeros((2, 3, 4))).shape == (2, 3, 4)


def test_brier_loss_sums_the_classes_by_hand():
    probabilities = np.array([[0.7, 0.2, 0.1], [0.0, 1.0, 0.0], [1 / 3, 1 / 3, 1 / 3]])
    labels = np.array([0, 0, 2])
    # 0.3^2 + 0.2^2 + 0.1^2; a sure wrong answer costs 2; (1/3)^2 * 2 + (2/3)^2
    expected = [0.14, 2.0, 2 / 9 + 4 / 9]
    np.testing.assert_allclose(
        brier_loss(probabilities - one_hot(labels)), expected, rtol=1e-12
    )
    # the class axis is summed away, leading axes stay
    assert brier_loss(np.zeros((5, 4, 3))).shape == (5, 4)


def test_brier_loss_agrees_with_scikit_learn():
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 4, size=30)
    probabilities = rng.dirichlet(np.ones(4), size=30)
    ours = brier_loss(probabilities - one_hot(labels, 4)).mean()
    assert ours == pytest.approx(
        brier_score_loss(
            labels, probabilities, labels=[0, 1, 2, 3], scale_by_half=False
        ),
        rel=1e-12,
    )
    # binary: twice sklearn's default (half-scaled) Brier score of P(class 1)
    binary = rng.integers(0, 2, size=30)
    p1 = rng.random(30)
    two_columns = np.column_stack([1 - p1, p1])
    assert brier_loss(two_columns - one_hot(binary, 2)).mean() == pytest.approx(
        2 * brier_score_loss(binary, p1), rel=1e-12
    )


def test_margin_loss_is_segos_eq_8():
    # 3 voters, c of them correct: margin M = 2c/3 - 1, loss (1 - M)/2 = 1 - c/3
    for correct in range(4):
        margin = 2 * correct / 3 - 1
        residual = correct / 3 - 1
        assert margin_loss(np.array([residual]))[0] == pytest.approx((1 - margin) / 2)
    np.testing.assert_array_equal(margin_loss(np.array([-1.0, -0.5, 0.0])), [1, 0.5, 0])


# --- objective() -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "outputs", "vote", "voting"),
    [
        ("error", "correctness", True, "hard"),
        ("squared_margin", "correctness", False, "hard"),
        ("margin", "correctness", False, "hard"),
        ("log_loss", "true_class_probability", False, "soft"),
        ("brier", "probabilities", False, "soft"),
    ],
)
def test_every_classification_objective(name, outputs, vote, voting):
    chosen = objective("classification", name)
    assert chosen.name == name and chosen.task == "classification"
    assert chosen.outputs == outputs and chosen.vote is vote
    assert chosen.voting == voting
    assert CLASSIFICATION_OBJECTIVES[name] == chosen
    y = np.array([0, 2, 1, 2])
    if outputs == "probabilities":
        np.testing.assert_array_equal(
            chosen.target(y), [[1, 0, 0], [0, 0, 1], [0, 1, 0], [0, 0, 1]]
        )
    else:
        np.testing.assert_array_equal(chosen.target(y), np.ones(4))


def test_the_per_sample_losses_of_the_objectives():
    r = np.array([-1.0, -0.5, 0.0])
    np.testing.assert_allclose(
        objective("classification", "squared_margin").per_sample_loss(r), [1, 0.25, 0]
    )
    np.testing.assert_allclose(
        objective("classification", "margin").per_sample_loss(r), [1, 0.5, 0]
    )
    np.testing.assert_allclose(
        objective("classification", "error").per_sample_loss(r), [1, 0.5, 0]
    )
    np.testing.assert_allclose(
        objective("classification", "log_loss").per_sample_loss(np.array([-0.5])),
        [math.log(2)],
    )


def test_auto_objectives():
    assert objective("classification", "auto").name == "squared_margin"
    assert objective("classification", "auto", auto="error").name == "error"
    assert objective("classification", "auto", auto="brier").name == "brier"
    # auto only replaces "auto"
    assert objective("classification", "log_loss", auto="error").name == "log_loss"
    regression = objective("regression", "auto")
    assert regression.name == "mse" and regression.outputs == "predictions"
    assert regression.voting == "hard" and not regression.vote
    y = np.array([0.5, -1.0, 2.0])
    np.testing.assert_array_equal(regression.target(y), y)
    assert regression.target(np.array([1, 2])).dtype == float


@pytest.mark.parametrize(
    ("short", "name"),
    [("m", "mse"), ("h", "huber"), ("t", "tukey"), ("huber", "huber")],
)
def test_regression_shorthands_are_named_in_full(short, name):
    chosen = objective("regression", short)
    assert chosen.name == name and chosen.task == "regression"


def test_the_huber_objective_is_hubers_loss():
    huber = objective("regression", "h").per_sample_loss
    # quadratic inside c, linear outside: c (|r| - c / 2)
    np.testing.assert_allclose(
        huber(np.array([0.5, -3.0])), [0.125, HUBER_C * (3.0 - HUBER_C / 2)]
    )


@pytest.mark.parametrize(
    ("task", "name", "message"),
    [
        ("classification", "mse", "loss 'mse' does not apply to classification"),
        ("classification", "hinge", "loss 'hinge' does not apply to classification"),
        ("regression", "log_loss", "unknown regression loss 'log_loss'"),
        ("regression", "brier", "unknown regression loss 'brier'"),
        ("ranking", "auto", "unknown task 'ranking'"),
    ],
)
def test_unknown_objectives_and_tasks_are_named(task, name, message):
    with pytest.raises(ValueError, match=message):
        objective(task, name)


def test_the_classification_error_lists_every_objective():
    with pytest.raises(ValueError) as error:
        objective("classification", "mse")
    for name in ("brier", "error", "log_loss", "margin", "squared_margin", "auto"):
        assert name in str(error.value)


# --- the mean ensemble of probabilities --------------------------------------------


@pytest.mark.parametrize("member_count", [0, 1, 4])
def test_mean_ensemble_losses_of_probabilities_equal_sklearn(member_count):
    rng = np.random.default_rng(member_count)
    t = 25  # several row blocks of (t, n, K) candidates
    pool = rng.dirichlet(0.5 * np.ones(K), size=(t, N))
    members = list(rng.integers(0, t, size=member_count))
    weights = fold_weights(FOLDS)

    brier = cv_loss_of_mean_ensembles(
        pool[members].sum(axis=0),
        member_count,
        pool,
        one_hot(LABELS),
        brier_loss,
        weights,
    )
    true_class = pool[:, np.arange(N), LABELS]  # (t, n)
    logs = cv_loss_of_mean_ensembles(
        true_class[members].sum(axis=0),
        member_count,
        true_class,
        np.ones(N),
        log_loss_of_true_class,
        weights,
    )

    expected_brier, expected_log = [], []
    for h in range(t):
        mean = np.mean(pool[[*members, h]], axis=0)
        expected_brier.append(
            brier_score_loss(LABELS, mean, labels=CLASSES, scale_by_half=False)
        )
        expected_log.append(log_loss(LABELS, mean, labels=CLASSES))
    np.testing.assert_allclose(brier, expected_brier, rtol=1e-12)
    np.testing.assert_allclose(logs, expected_log, rtol=1e-12)
    # the search's in-place log-loss path: the same bits, one weighting or two
    dedicated = log_loss_of_mean_ensembles(
        true_class[members].sum(axis=0), member_count, true_class, weights
    )
    np.testing.assert_array_equal(dedicated, logs)
    both = np.column_stack([weights, fold_weights(np.arange(N) % 5)])
    np.testing.assert_array_equal(
        log_loss_of_mean_ensembles(
            true_class[members].sum(axis=0), member_count, true_class, both
        ),
        cv_loss_of_mean_ensembles(
            true_class[members].sum(axis=0),
            member_count,
            true_class,
            np.ones(N),
            log_loss_of_true_class,
            both,
        ),
    )


def test_mean_ensemble_losses_with_several_weightings_at_once():
    rng = np.random.default_rng(3)
    pool = rng.dirichlet(np.ones(K), size=(7, N))
    other_folds = np.arange(N) % 5  # unequal folds
    weights = np.column_stack([fold_weights(FOLDS), fold_weights(other_folds)])
    losses = cv_loss_of_mean_ensembles(
        np.zeros((N, K)), 0, pool, one_hot(LABELS), brier_loss, weights
    )
    assert losses.shape == (7, 2)
    for h in range(7):
        per_sample = ((pool[h] - one_hot(LABELS)) ** 2).sum(axis=1)
        for column, folds in enumerate((FOLDS, other_folds)):
            fold_means = [per_sample[folds == k].mean() for k in np.unique(folds)]
            assert losses[h, column] == pytest.approx(np.mean(fold_means), rel=1e-12)


def test_mean_ensemble_losses_with_unequal_folds_by_hand():
    labels = np.array([0, 0, 1])
    weights = fold_weights(np.array([0, 0, 1]))  # fold 0: two samples, fold 1: one
    candidate = np.array([[[0.8, 0.2], [0.4, 0.6], [0.5, 0.5]]])
    # alone: per-sample Brier 0.08, 0.72, 0.5 -> folds 0.4, 0.5 -> 0.45
    alone = cv_loss_of_mean_ensembles(
        np.zeros((3, 2)), 0, candidate, one_hot(labels, 2), brier_loss, weights
    )
    assert alone[0] == pytest.approx(0.45, rel=1e-12)
    true_class = np.array([[0.8, 0.4, 0.5]])
    alone_log = cv_loss_of_mean_ensembles(
        np.zeros(3), 0, true_class, np.ones(3), log_loss_of_true_class, weights
    )
    expected = ((-math.log(0.8) - math.log(0.4)) / 2 - math.log(0.5)) / 2
    assert alone_log[0] == pytest.approx(expected, rel=1e-12)

    # with one member [[.6, .4], [.6, .4], [.1, .9]]: the mean is
    # [[.7, .3], [.5, .5], [.3, .7]], Brier 0.18, 0.5, 0.18 -> folds 0.34, 0.18
    member = np.array([[0.6, 0.4], [0.6, 0.4], [0.1, 0.9]])
    pair = cv_loss_of_mean_ensembles(
        member, 1, candidate, one_hot(labels, 2), brier_loss, weights
    )
    assert pair[0] == pytest.approx(0.26, rel=1e-12)
    pair_log = cv_loss_of_mean_ensembles(
        member[np.arange(3), labels],
        1,
        true_class,
        np.ones(3),
        log_loss_of_true_class,
        weights,
    )
    expected = ((-math.log(0.7) - math.log(0.5)) / 2 - math.log(0.7)) / 2
    assert pair_log[0] == pytest.approx(expected, rel=1e-12)


# --- the pool ---------------------------------------------------------------------


def test_a_classification_pool_keeps_probabilities_true_class_and_correctness():
    labels = np.array([0, 1, 2, 1])
    probabilities = np.array(
        [[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.7, 0.1, 0.2], [0.1, 0.1, 0.8]]
    )
    predictions = np.array([0.0, 1.0, 0.0, 2.0])
    pool = Pool(4, initial_capacity=1, labels=labels)
    assert pool.n_classes == 3
    pool.add({}, np.zeros(1), TrialResult(predictions, 0.1, None, probabilities))
    pool.add({}, np.zeros(1), TrialResult(None, 0.1, "boom"))
    # no probabilities: the one-hot of the labels stands for them
    hard = np.array([2.0, 1.0, 2.0, 0.0])
    pool.add({}, np.zeros(1), TrialResult(hard, 0.1))

    kept = pool.member_outputs("probabilities")
    assert kept.shape == (3, 4, 3)
    np.testing.assert_array_equal(kept[0], probabilities)
    np.testing.assert_array_equal(kept[2], [[0, 0, 1], [0, 1, 0], [0, 0, 1], [1, 0, 0]])
    np.testing.assert_array_equal(
        pool.member_outputs("true_class_probability")[0], [0.6, 0.5, 0.2, 0.1]
    )
    np.testing.assert_array_equal(
        pool.member_outputs("true_class_probability")[2], [0, 1, 1, 0]
    )
    np.testing.assert_array_equal(pool.member_outputs("correctness")[0], [1, 1, 0, 0])
    np.testing.assert_array_equal(pool.member_outputs("correctness")[2], [0, 1, 1, 0])
    np.testing.assert_array_equal(pool.member_outputs("predictions")[0], predictions)
    # the failed trial is NaN in every kind
    for kind in (
        "predictions",
        "correctness",
        "true_class_probability",
        "probabilities",
    ):
        assert np.isnan(pool.member_outputs(kind)[1]).all(), kind
        assert len(pool.member_outputs(kind)) == 3, kind
    assert list(pool.ok) == [True, False, True]
    # the votes' integer codes, grown with the rows; -1 for the failed trial
    codes = pool.member_outputs("class_codes")
    assert codes.dtype == np.int32
    np.testing.assert_array_equal(codes, [[0, 1, 0, 2], [-1] * 4, [2, 1, 2, 0]])


def test_the_pool_names_bad_shapes():
    pool = Pool(4, labels=np.array([0, 1, 2, 1]))
    with pytest.raises(
        ValueError, match=r"trial 0: probabilities of shape \(4, 2\), expected \(4, 3\)"
    ):
        pool.add(
            {}, np.zeros(1), TrialResult(np.zeros(4), 0.0, None, np.full((4, 2), 0.5))
        )
    with pytest.raises(
        ValueError, match=r"trial 0: predictions of shape \(3,\), expected \(4,\)"
    ):
        pool.add({}, np.zeros(1), TrialResult(np.zeros(3), 0.0, None, np.ones((4, 3))))
    # class codes outside 0..K-1, or not whole, would index another row's votes
    for bad in ([0, 1, 3, 1], [0, -1, 2, 1], [0, 1.5, 2, 1]):
        with pytest.raises(
            ValueError, match=r"trial 0: predicted class codes must be whole numbers"
        ):
            pool.add({}, np.zeros(1), TrialResult(np.array(bad, dtype=float), 0.0))
    assert len(pool) == 0  # nothing was added by the refused trials


def test_a_regression_pool_has_no_probabilities():
    pool = Pool(3)
    pool.add({}, np.zeros(1), TrialResult(np.array([1.0, 2.0, 3.0]), 0.0))
    with pytest.raises(
        ValueError,
        match=r"a regression pool has no 'probabilities' outputs; it has \['predictions'\]",
    ):
        pool.member_outputs("probabilities")
    with pytest.raises(
        ValueError, match="a classification pool has no 'votes' outputs"
    ):
        Pool(3, labels=np.array([0, 1, 1])).member_outputs("votes")


def _old_state(pool):
    """The state a pool pickled before probabilities were kept would have:
    one (capacity, n) array of predictions and one of correctness."""
    predictions = np.full((4, pool.n_samples), np.nan)
    predictions[: len(pool)] = pool.predictions
    state = {
        "n_samples": pool.n_samples,
        "labels": pool.labels,
        "_predictions": predictions,
        "_correct": None
        if pool.labels is None
        else np.where(np.isnan(predictions), np.nan, predictions == pool.labels),
        "configs": list(pool.configs),
        "encoded": list(pool.encoded),
        "fit_seconds": list(pool.fit_seconds),
        "errors": list(pool.errors),
    }
    return state


def test_an_old_classification_pickle_loads_with_one_hot_probabilities():
    labels = np.array([0, 1, 2, 1, 0])
    new = Pool(5, labels=labels)
    first = np.array([0.0, 1.0, 1.0, 1.0, 2.0])
    second = np.array([2.0, 1.0, 2.0, 0.0, 0.0])
    new.add({"a": 1}, np.array([0.1]), TrialResult(first, 0.5))
    new.add({"a": 2}, np.array([0.2]), TrialResult(None, 0.25, "boom"))
    new.add({"a": 3}, np.array([0.3]), TrialResult(second, 0.75))

    old = Pool.__new__(Pool)
    old.__setstate__(_old_state(new))
    # the same through pickle itself: an object whose __dict__ is the old state
    stale = Pool.__new__(Pool)
    stale.__dict__.update(_old_state(new))
    loaded = pickle.loads(pickle.dumps(stale))

    for pool in (old, loaded):
        assert len(pool) == 3 and pool.n_classes == 3
        assert pool.configs == [{"a": 1}, {"a": 2}, {"a": 3}]
        assert pool.errors == [None, "boom", None]
        assert pool.fit_seconds == [0.5, 0.25, 0.75]
        assert list(pool.ok) == [True, False, True]
        assert not hasattr(pool, "_predictions") and not hasattr(pool, "_correct")
        probabilities = pool.member_outputs("probabilities")
        np.testing.assert_array_equal(probabilities[0], one_hot(first))
        np.testing.assert_array_equal(probabilities[2], one_hot(second))
        assert np.isnan(probabilities[1]).all()
        np.testing.assert_array_equal(
            pool.member_outputs("correctness")[[0, 2]],
            [first == labels, second == labels],
        )
        np.testing.assert_array_equal(
            pool.member_outputs("true_class_probability")[[0, 2]],
            [first == labels, second == labels],
        )
        np.testing.assert_array_equal(pool.predictions[[0, 2]], [first, second])
        # and it goes on growing
        for _ in range(3):
            pool.add({}, np.zeros(1), TrialResult(first, 0.0))
        assert len(pool) == 6
        np.testing.assert_array_equal(
            pool.member_outputs("probabilities")[5], one_hot(first)
        )


def test_an_old_regression_pickle_loads():
    new = Pool(3)
    new.add({}, np.zeros(1), TrialResult(np.array([1.0, 2.0, 3.0]), 0.0))
    new.add({}, np.zeros(1), TrialResult(None, 0.0, "boom"))
    old = Pool.__new__(Pool)
    old.__setstate__(_old_state(new))
    assert len(old) == 2 and old.labels is None
    np.testing.assert_array_equal(old.predictions[0], [1.0, 2.0, 3.0])
    assert np.isnan(old.predictions[1]).all()


def test_a_new_pool_round_trips_through_pickle():
    pool = Pool(4, labels=np.array([0, 1, 2, 1]))
    probabilities = np.array(
        [[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.7, 0.1, 0.2], [0.1, 0.1, 0.8]]
    )
    pool.add(
        {}, np.zeros(1), TrialResult(np.array([0, 1, 0, 2.0]), 0.0, None, probabilities)
    )
    loaded = pickle.loads(pickle.dumps(pool))
    np.testing.assert_array_equal(
        loaded.member_outputs("probabilities")[0], probabilities
    )
    # derived kinds are recomputed on load, not pickled
    np.testing.assert_array_equal(loaded.member_outputs("class_codes"), [[0, 1, 0, 2]])


# --- out-of-fold probabilities --------------------------------------------------------


def _iris():
    data = load_iris()
    return data.data, data.target, np.arange(150) % 5


def _breast_cancer():
    data = load_breast_cancer()
    X, y = data.data[::3, :6], data.target[::3]  # 190 samples, 6 features
    return X, y, np.arange(len(y)) % 4


@pytest.mark.parametrize("data", [_iris, _breast_cancer])
@pytest.mark.parametrize(
    "model",
    [
        DecisionTreeClassifier(max_depth=3, random_state=0),
        make_pipeline(StandardScaler(), LogisticRegression()),
        make_pipeline(StandardScaler(), KNeighborsClassifier(n_neighbors=7)),
    ],
    ids=["tree", "logistic", "knn"],
)
def test_out_of_fold_labels_and_probabilities_equal_cross_val_predict(data, model):
    X, y, folds = data()
    predictions, probabilities = out_of_fold_predictions(model, X, y, folds)
    split = PredefinedSplit(folds)
    expected_labels = cross_val_predict(clone(model), X, y, cv=split, method="predict")
    expected_probabilities = cross_val_predict(
        clone(model), X, y, cv=split, method="predict_proba"
    )
    np.testing.assert_array_equal(predictions, expected_labels)
    assert probabilities.shape == (len(y), len(np.unique(y)))
    np.testing.assert_allclose(probabilities, expected_probabilities, rtol=1e-12)
    # the labels come from the same fits as the probabilities
    np.testing.assert_array_equal(probabilities.argmax(axis=1), predictions)


@pytest.mark.parametrize(
    "model", [SVC(), make_pipeline(StandardScaler(), SVC())], ids=["svc", "scaled_svc"]
)
def test_a_classifier_without_probabilities_gives_its_one_hot_votes(model):
    X, y, folds = _iris()
    predictions, probabilities = out_of_fold_predictions(model, X, y, folds)
    np.testing.assert_array_equal(
        predictions,
        cross_val_predict(clone(model), X, y, cv=PredefinedSplit(folds)),
    )
    np.testing.assert_array_equal(probabilities, one_hot(predictions))


def test_a_fold_missing_a_class_leaves_its_column_zero():
    rng = np.random.default_rng(0)
    n = 30
    folds = np.arange(n) % 3
    y = np.where(np.arange(n) % 2 == 0, 0, 2)
    y[[0, 3, 6]] = 1  # class 1 only in fold 0: the fold-0 model never saw it
    X = rng.normal(size=(n, 2)) + y[:, None]
    model = LogisticRegression()
    predictions, probabilities = out_of_fold_predictions(model, X, y, folds)

    test = folds == 0
    fitted = LogisticRegression().fit(X[~test], y[~test])
    assert list(fitted.classes_) == [0, 2]
    proba = fitted.predict_proba(X[test])
    np.testing.assert_array_equal(probabilities[test, 1], 0.0)
    np.testing.assert_allclose(probabilities[test, 0], proba[:, 0], rtol=1e-12)
    np.testing.assert_allclose(probabilities[test, 2], proba[:, 1], rtol=1e-12)
    np.testing.assert_array_equal(predictions[test], fitted.predict(X[test]))
    np.testing.assert_allclose(probabilities.sum(axis=1), 1.0, rtol=1e-12)
    # scikit-learn places the columns the same way
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        warnings.simplefilter("ignore", UserWarning)
        expected = cross_val_predict(
            model, X, y, cv=PredefinedSplit(folds), method="predict_proba"
        )
    np.testing.assert_allclose(probabilities, expected, rtol=1e-12)


def test_regression_out_of_fold_predictions_have_no_probabilities():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 3))
    y = X[:, 0] + 0.1 * rng.normal(size=40)
    folds = np.arange(40) % 4
    model = DecisionTreeRegressor(max_depth=3, random_state=0)
    predictions, probabilities = out_of_fold_predictions(model, X, y, folds)
    assert probabilities is None
    np.testing.assert_array_equal(
        predictions, cross_val_predict(model, X, y, cv=PredefinedSplit(folds))
    )


# --- a hand-filled pool and the strategies -----------------------------------------

# Trials of a classification pool on LABELS: probabilities mixed from the truth
# and noise (labels: their argmax); trial 3 failed; trial 5 has no
# probabilities (its one-hot labels stand for them), and is sure of wrong
# classes on some samples (log-loss -log(eps) there).
_RNG = np.random.default_rng(11)
_TRIALS = []
for _trial, _mix in enumerate([0.5, 0.3, 0.6, 0.0, 0.2, 0.0, 0.45, 0.35]):
    if _trial == 3:
        _TRIALS.append(None)
    elif _trial == 5:
        _hard = LABELS.copy()
        _hard[[1, 4, 8]] = (_hard[[1, 4, 8]] + 1) % K
        _TRIALS.append((_hard.astype(float), None))
    else:
        _p = _mix * one_hot(LABELS) + (1 - _mix) * _RNG.dirichlet(0.7 * np.ones(K), N)
        _TRIALS.append((_p.argmax(axis=1).astype(float), _p))


def trial_result(trial):
    if trial is None:
        return TrialResult(None, 0.0, "ValueError: boom")
    predictions, probabilities = trial
    return TrialResult(predictions, 0.0, None, probabilities)


def hand_pool():
    pool = Pool(N, labels=LABELS)
    for trial in _TRIALS:
        pool.add({"a": 0.5}, np.array([0.5]), trial_result(trial))
    return pool


# The oracles' view of that pool: labels and probabilities per trial.
OK = np.array([trial is not None for trial in _TRIALS])
POOL_LABELS = np.array(
    [np.full(N, np.nan) if t is None else t[0] for t in _TRIALS], dtype=float
)
POOL_PROBABILITIES = np.array(
    [
        np.full((N, K), np.nan)
        if t is None
        else (one_hot(t[0]) if t[1] is None else t[1])
        for t in _TRIALS
    ]
)


def brute_vote_error(labels_of_members, weights=None):
    """Zero-one error of the weighted plurality vote, ties to the lowest class."""
    if weights is None:
        weights = [1.0] * len(labels_of_members)
    wrong = 0
    for i in range(N):
        scores = [0.0] * K
        for weight, row in zip(weights, labels_of_members, strict=True):
            scores[int(row[i])] += weight
        winner = scores.index(max(scores))  # the first of equal scores
        wrong += winner != LABELS[i]
    return wrong / N


def brute_loss(name, members, weights=None):
    """The objective `name` of the ensemble of pool trials `members` (repeats
    allowed), weighted by `weights` (default: equal)."""
    if name == "error":
        return brute_vote_error(POOL_LABELS[members], weights)
    if name in ("squared_margin", "margin"):
        # SEGO eq. 7-9 literally: M = 1/m sum_h w_h [1 - 2 l01(h)]
        margin = np.average(
            [1 - 2 * (POOL_LABELS[h] != LABELS) for h in members],
            axis=0,
            weights=weights,
        )
        per_sample = (
            (1 - margin) ** 2 / 4 if name == "squared_margin" else (1 - margin) / 2
        )
        return per_sample.mean()
    mean = np.average(POOL_PROBABILITIES[members], axis=0, weights=weights)
    if name == "log_loss":
        return log_loss(LABELS, mean, labels=CLASSES)
    return brier_score_loss(LABELS, mean, labels=CLASSES, scale_by_half=False)


def test_the_hand_filled_pool_is_what_the_oracles_read():
    pool = hand_pool()
    np.testing.assert_array_equal(
        pool.member_outputs("probabilities"), POOL_PROBABILITIES
    )
    np.testing.assert_array_equal(pool.predictions, POOL_LABELS)
    assert list(pool.ok) == list(OK)
    # trial 5 is sure of a wrong class on 3 of 12 samples: log-loss 3 * 36.04 / 12
    assert brute_loss("log_loss", [5]) == pytest.approx(
        -3 * math.log(np.finfo(float).eps) / 12, rel=1e-9
    )


def unused_evaluator(config):
    raise AssertionError("the test fills the pool by hand")


OBJECTIVES = ["log_loss", "brier", "error", "squared_margin", "margin"]


@pytest.mark.parametrize("name", OBJECTIVES)
def test_sego_gp_targets_equal_brute_force_on_a_hand_filled_pool(name):
    pool = hand_pool()
    search = sego_search(
        RandomSearch(SPACE, seed=0),
        unused_evaluator,
        LABELS,
        FOLDS,
        ensemble_size=3,
        loss=name,
    )
    strategy = search.strategy
    assert strategy.scorer.objective.name == name
    # The candidates are a slice of the pool (Strategy.targets).
    candidates = range(len(pool))
    strategy.start()
    # an empty ensemble: each model alone
    context = strategy.begin(0, pool)
    targets = strategy.targets(context, pool, slice(None), [])
    expected = [brute_loss(name, [h]) if OK[h] else math.nan for h in candidates]
    np.testing.assert_allclose(targets, expected, rtol=1e-10)

    for slots in ([4, None, 2], [0, 5, 5], [6, 1, 0]):
        strategy._slots = list(slots)
        for iteration in range(3):
            context = strategy.begin(iteration, pool)
            others = [
                s for k, s in enumerate(slots) if k != iteration and s is not None
            ]
            targets = strategy.targets(context, pool, slice(None), [])
            expected = [
                brute_loss(name, [*others, h]) if OK[h] else math.nan
                for h in candidates
            ]
            np.testing.assert_allclose(
                targets, expected, rtol=1e-10, err_msg=f"{slots}, {iteration}"
            )
            # part of the pool, and one candidate at a time as a new trial is told
            np.testing.assert_allclose(
                strategy.targets(context, pool, slice(2, 6), []),
                expected[2:6],
                rtol=1e-10,
            )
            for h in candidates:
                np.testing.assert_allclose(
                    strategy.targets(context, pool, slice(h, h + 1), []),
                    [expected[h]],
                    rtol=1e-10,
                )


def test_the_error_objective_breaks_vote_ties_to_the_lowest_class():
    # one other member and a candidate that disagree: a 1-1 tie on every
    # sample where both are wrong or they differ, won by the lower class
    pool = Pool(3, labels=np.array([2, 0, 1]))
    pool.add({}, np.zeros(1), TrialResult(np.array([2.0, 1.0, 1.0]), 0.0))
    pool.add({}, np.zeros(1), TrialResult(np.array([1.0, 0.0, 2.0]), 0.0))
    search = sego_search(
        RandomSearch(SPACE, seed=0),
        unused_evaluator,
        np.array([2, 0, 1]),
        np.arange(3),
        ensemble_size=2,
        loss="error",
    )
    strategy = search.strategy
    strategy.start()
    strategy._slots = [0, None]
    context = strategy.begin(1, pool)
    # votes {2, 1} -> 1 (wrong), {1, 0} -> 0 (right), {1, 2} -> 1 (right)
    assert strategy.targets(context, pool, slice(1, 2), [])[0] == pytest.approx(1 / 3)
    # with itself: 0's own labels, 2 1 1 -> one wrong of three
    assert strategy.targets(context, pool, slice(0, 1), [])[0] == pytest.approx(1 / 3)


class RecordingRandomSearch(RecordingRetargets, RandomSearch):
    """Keeps every set of GP targets the strategy hands over."""


def handing_out_the_trials():
    trials = iter(_TRIALS)

    def evaluate(config):
        return trial_result(next(trials))

    return evaluate


@pytest.mark.parametrize("name", OBJECTIVES)
def test_a_sego_run_matches_brute_force_for_each_objective(name):
    size = 3
    optimizer = RecordingRandomSearch(SPACE, seed=0)
    search = sego_search(
        optimizer,
        handing_out_the_trials(),
        LABELS,
        FOLDS,
        ensemble_size=size,
        loss=name,
    )
    snapshots = []
    result = search.run(
        len(_TRIALS),
        callbacks=[lambda record: snapshots.append(list(search.strategy._slots))],
    )
    assert result.objective == name
    assert result.voting == ("soft" if name in ("log_loss", "brier") else "hard")
    np.testing.assert_array_equal(
        result.pool.member_outputs("probabilities"), POOL_PROBABILITIES
    )
    # a single model's CV loss
    expected_singles = [brute_loss(name, [h]) if OK[h] else math.nan for h in range(8)]
    np.testing.assert_allclose(result.single_losses, expected_singles, rtol=1e-10)

    previous = [None] * size
    for i, record in enumerate(result.history):
        others = [s for k, s in enumerate(previous) if k != i % size and s is not None]
        # the GP targets of the models trained before iteration i
        np.testing.assert_allclose(
            optimizer.retargets[i],
            [brute_loss(name, [*others, h]) if OK[h] else math.nan for h in range(i)],
            rtol=1e-10,
        )
        members = [s for s in snapshots[i] if s is not None]
        assert record.ensemble_loss == pytest.approx(
            brute_loss(name, members), rel=1e-10
        ), i
        # slot i mod m got a best replacement among the models so far
        best = min(brute_loss(name, [*others, h]) for h in range(i + 1) if OK[h])
        assert record.ensemble_loss == pytest.approx(best, rel=1e-10), i
        previous = snapshots[i]
    assert sorted(result.members) == sorted(s for s in previous if s is not None)
    assert result.history[-1].ensemble_loss == pytest.approx(
        brute_loss(name, result.members), rel=1e-10
    )


@pytest.mark.parametrize("sizing", ["growing", "dynamic"])
@pytest.mark.parametrize("name", ["log_loss", "brier", "error"])
def test_segor_sizing_on_classification_objectives_matches_brute_force(name, sizing):
    # The slot ensemble SEGOR's sizing methods run on, with a classification objective.
    search = Search(
        SlotEnsemble(PoolScorer(LABELS, FOLDS, name, "classification"), sizing=sizing),
        RandomSearch(SPACE, seed=0),
        from_config(handing_out_the_trials()),
    )
    snapshots = []
    result = search.run(
        len(_TRIALS),
        callbacks=[lambda record: snapshots.append(list(search.strategy._slots))],
    )
    assert result.objective == name
    for i, record in enumerate(result.history):
        assert record.ensemble_size == len(snapshots[i])
        assert record.ensemble_loss == pytest.approx(
            brute_loss(name, snapshots[i]), rel=1e-10
        ), (i, record.action)


@pytest.mark.parametrize("name", ["log_loss", "brier", "error"])
def test_esmbo_reports_the_loss_of_its_weighted_ensemble(name):
    result = esmbo_search(
        RandomSearch(SPACE, seed=0),
        handing_out_the_trials(),
        LABELS,
        FOLDS,
        n_replicas=4,
        loss=name,
        task="classification",
    ).run(len(_TRIALS))
    assert result.objective == name
    weights = result.member_weights
    members = list(weights)
    assert result.history[-1].ensemble_loss == pytest.approx(
        brute_loss(name, members, [weights[h] for h in members]), rel=1e-10
    )


# --- post-hoc and agnostic Bayes selection ------------------------------------------


def hand_result():
    singles = np.array(
        [brute_loss("error", [h]) if OK[h] else math.nan for h in range(8)]
    )
    return EnsembleSearchResult(hand_pool(), [], singles, target=LABELS)


@pytest.mark.parametrize(
    ("loss", "name"),
    [
        ("log_loss", "log_loss"),
        ("brier", "brier"),
        ("error", "error"),
        ("auto", "log_loss"),
    ],
)
def test_posthoc_selection_reports_brute_force_losses(loss, name):
    result = posthoc_selection(hand_result(), LABELS, FOLDS, loss=loss, max_size=6)
    assert result.objective == name
    assert result.voting == ("soft" if name in ("log_loss", "brier") else "hard")
    assert all(OK[h] for h in result.members)
    path = [record.trial for record in result.history]
    for step, record in enumerate(result.history):
        assert record.ensemble_loss == pytest.approx(
            brute_loss(name, path[: step + 1]), rel=1e-10
        ), step
        # each step adds a best candidate
        best = min(brute_loss(name, [*path[:step], h]) for h in np.flatnonzero(OK))
        assert record.ensemble_loss == pytest.approx(best, rel=1e-10), step
    # the kept prefix is the best one, and its reported loss is its own
    reported = min(record.ensemble_loss for record in result.history)
    assert brute_loss(name, result.members) == pytest.approx(reported, rel=1e-10)
    assert result.members == path[: len(result.members)]


@pytest.mark.parametrize("name", ["log_loss", "brier"])
def test_posthoc_bfgs_weights_on_probability_losses(name):
    source = hand_result()
    counts = posthoc_selection(source, LABELS, FOLDS, loss=name, max_size=6)
    fitted = posthoc_selection(
        source, LABELS, FOLDS, loss=name, max_size=6, weighting="bfgs"
    )
    assert fitted.objective == name
    weights = fitted.member_weights
    assert sum(weights.values()) == pytest.approx(1.0)
    members = list(weights)
    count_weights = counts.member_weights
    assert (
        brute_loss(name, members, [weights[h] for h in members])
        <= brute_loss(name, list(count_weights), list(count_weights.values())) + 1e-12
    )


@pytest.mark.parametrize(
    ("loss", "name"), [("log_loss", "log_loss"), ("brier", "brier"), ("auto", "error")]
)
@pytest.mark.parametrize("posterior", ["bootstrap", "softmin"])
def test_agnostic_bayes_selection_reports_brute_force_losses(loss, name, posterior):
    result = agnostic_bayes_selection(
        hand_result(), LABELS, FOLDS, loss=loss, posterior=posterior, n_samples=200
    )
    assert result.objective == name
    assert result.voting == ("soft" if name in ("log_loss", "brier") else "hard")
    weights = result.member_weights
    assert sum(weights.values()) == pytest.approx(1.0)
    assert not set(weights) & set(np.flatnonzero(~OK))  # failed trials get none
    members = list(weights)
    assert result.history[-1].ensemble_loss == pytest.approx(
        brute_loss(name, members, [weights[h] for h in members]), rel=1e-10
    )


def test_argmin_selection_picks_the_best_single_model_by_the_objective():
    source = hand_result()
    for name in ("log_loss", "brier"):
        result = agnostic_bayes_selection(
            source, LABELS, FOLDS, loss=name, posterior="argmin"
        )
        singles = {h: brute_loss(name, [h]) for h in np.flatnonzero(OK)}
        assert result.member_weights == {min(singles, key=singles.get): 1.0}


def test_results_without_an_objective_vote_hard():
    result = hand_result()
    assert result.objective == "" and result.voting == "hard"
    result.objective = "brier"
    assert result.voting == "soft"


# --- test metrics of a refitted classifier --------------------------------------------


def test_multiclass_test_metrics_equal_sklearn():
    data = load_iris()
    names = np.array(["setosa", "versicolor", "virginica"])[data.target]
    features = pd.DataFrame(data.data, columns=data.feature_names)
    train = np.arange(150) % 3 != 0
    model = LogisticRegression(max_iter=500).fit(features[train], names[train])
    test_features, test_target = features[~train], pd.Series(names[~train])

    metrics = classification_test_metrics(model, test_features, test_target)

    proba = model.predict_proba(test_features)
    assert set(metrics) == {"log_loss", "brier", "roc_auc", "ece"}
    assert metrics["log_loss"] == pytest.approx(log_loss(test_target, proba), rel=1e-12)
    codes = np.searchsorted(model.classes_, test_target)
    assert metrics["ece"] == expected_calibration_error(proba, codes)[0]
    assert metrics["roc_auc"] == pytest.approx(
        roc_auc_score(test_target, proba, multi_class="ovr"), rel=1e-12
    )
    brier = np.mean(
        [
            sum(
                (proba[i, k] - (label == model.classes_[k])) ** 2
                for k in range(len(model.classes_))
            )
            for i, label in enumerate(test_target)
        ]
    )
    assert metrics["brier"] == pytest.approx(brier, rel=1e-12)


def test_binary_test_metrics_equal_sklearn():
    X, y, _ = _breast_cancer()
    features = pd.DataFrame(X)
    train = np.arange(len(y)) % 2 == 0
    model = make_pipeline(StandardScaler(), LogisticRegression()).fit(
        features[train], y[train]
    )
    test_features, test_target = features[~train], pd.Series(y[~train])
    metrics = classification_test_metrics(model, test_features, test_target)
    p1 = model.predict_proba(test_features)[:, 1]
    assert metrics["log_loss"] == pytest.approx(
        log_loss(test_target, model.predict_proba(test_features)), rel=1e-12
    )
    assert metrics["roc_auc"] == pytest.approx(
        roc_auc_score(test_target, p1), rel=1e-12
    )
    assert metrics["brier"] == pytest.approx(
        2 * brier_score_loss(test_target, p1), rel=1e-12
    )


def test_the_auc_is_nan_when_the_test_part_lacks_a_class():
    X, y, _ = _iris()
    features = pd.DataFrame(X)
    model = LogisticRegression(max_iter=500).fit(features, y)
    # multiclass: the test part holds classes 0 and 1 only
    test = y < 2
    with pytest.warns(UndefinedMetricWarning):
        metrics = classification_test_metrics(model, features[test], pd.Series(y[test]))
    assert math.isnan(metrics["roc_auc"])
    proba = model.predict_proba(features[test])
    assert metrics["log_loss"] == pytest.approx(
        log_loss(y[test], proba, labels=[0, 1, 2]), rel=1e-12
    )
    assert metrics["brier"] == pytest.approx(
        ((proba - one_hot(y[test])) ** 2).sum(axis=1).mean(), rel=1e-12
    )
    # binary: the test part holds one class
    binary = LogisticRegression(max_iter=500).fit(features[y > 0], y[y > 0])
    with pytest.warns(UndefinedMetricWarning):
        metrics = classification_test_metrics(
            binary, features[y == 2], pd.Series(y[y == 2])
        )
    assert math.isnan(metrics["roc_auc"])
    assert math.isfinite(metrics["log_loss"]) and math.isfinite(metrics["brier"])


# --- soft voting with a member that has no probabilities -----------------------------


def test_soft_voting_takes_the_one_hot_vote_of_a_member_without_probabilities():
    X, y, _ = _iris()
    X = X[:, :2]  # two features: the SVC and the logistic model disagree somewhere
    ensemble = WeightedVoteClassifier(
        [("svc", SVC()), ("logistic", LogisticRegression(max_iter=500))],
        weights=[1.0, 3.0],
        voting="soft",
    ).fit(X, y + 1)  # labels 1..3: members see codes 0..2
    svc = SVC().fit(X, y)
    logistic = LogisticRegression(max_iter=500).fit(X, y)
    expected = 0.25 * one_hot(svc.predict(X)) + 0.75 * logistic.predict_proba(X)
    proba = ensemble.predict_proba(X)
    np.testing.assert_allclose(proba, expected, rtol=1e-12)
    assert (svc.predict(X) != logistic.predict(X)).any()
    np.testing.assert_array_equal(ensemble.predict(X), expected.argmax(axis=1) + 1)
    np.testing.assert_array_equal(ensemble.classes_, [1, 2, 3])
