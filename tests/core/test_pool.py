import pickle

import numpy as np
import pytest

from ensemble_bo.core.pool import Pool
from ensemble_bo.core.trials import TrialResult


def test_regression_pool_outputs_are_its_predictions_and_grow():
    pool = Pool(3, initial_capacity=1)
    pool.add({"a": 1}, np.zeros(1), TrialResult(np.array([1.0, 2.0, 3.0]), 0.1))
    pool.add({"a": 2}, np.zeros(1), TrialResult(None, 0.2, "ValueError: x"))
    pool.add({"a": 3}, np.zeros(1), TrialResult(np.array([4.0, 5.0, 6.0]), 0.3))
    np.testing.assert_array_equal(pool.member_outputs("predictions"), pool.predictions)
    np.testing.assert_array_equal(pool.predictions[2], [4.0, 5.0, 6.0])
    assert np.isnan(pool.predictions[1]).all()
    assert list(pool.ok) == [True, False, True]


def test_classification_pool_keeps_correctness_of_each_model():
    labels = np.array([0, 1, 2, 1])
    pool = Pool(4, initial_capacity=1, labels=labels)
    pool.add({}, np.zeros(1), TrialResult(np.array([0.0, 1.0, 1.0, 0.0]), 0.1))
    pool.add({}, np.zeros(1), TrialResult(None, 0.1, "boom"))
    pool.add({}, np.zeros(1), TrialResult(np.array([2.0, 1.0, 2.0, 1.0]), 0.1))
    correctness = pool.member_outputs("correctness")
    np.testing.assert_array_equal(correctness[0], [1, 1, 0, 0])
    assert np.isnan(correctness[1]).all()
    np.testing.assert_array_equal(correctness[2], [0, 1, 1, 1])
    np.testing.assert_array_equal(pool.predictions[2], [2, 1, 2, 1])


def test_pool_rejects_labels_of_the_wrong_length():
    with pytest.raises(ValueError, match=r"labels of shape \(3,\), expected \(4,\)"):
        Pool(4, labels=np.array([0, 1, 0]))


def test_a_pickled_classification_pool_keeps_the_rows_in_use_of_what_others_derive_from():
    labels = np.array([0, 1, 2, 1])
    pool = Pool(4, initial_capacity=64, labels=labels)
    probabilities = np.array(
        [[0.6, 0.3, 0.1], [0.2, 0.5, 0.3], [0.1, 0.1, 0.8], [0.7, 0.2, 0.1]]
    )
    pool.add(
        {}, np.zeros(1), TrialResult(np.array([0.0, 1, 2, 0]), 0.1, None, probabilities)
    )
    pool.add({}, np.zeros(1), TrialResult(None, 0.1, "boom"))
    state = pool.__getstate__()
    assert set(state["_outputs"]) == {"predictions", "probabilities"}
    assert state["_outputs"]["probabilities"].shape == (2, 4, 3)  # not 64 rows
    loaded = pickle.loads(pickle.dumps(pool))
    for kind in (
        "predictions",
        "correctness",
        "probabilities",
        "true_class_probability",
        "probability_square_norm",
    ):
        np.testing.assert_array_equal(
            loaded.member_outputs(kind), pool.member_outputs(kind), err_msg=kind
        )
    np.testing.assert_allclose(
        loaded.member_outputs("true_class_probability")[0], [0.6, 0.5, 0.8, 0.2]
    )
    np.testing.assert_allclose(
        loaded.member_outputs("probability_square_norm")[0], (probabilities**2).sum(1)
    )
    loaded.add({}, np.zeros(1), TrialResult(np.array([1.0, 1, 1, 1]), 0.1))  # grows
    assert len(loaded) == 3 and loaded.member_outputs("correctness")[2].tolist() == [
        0,
        1,
        0,
        1,
    ]
