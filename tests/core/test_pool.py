import numpy as np
import pytest

from ensemble_bo.core.pool import Pool, TrialResult


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
