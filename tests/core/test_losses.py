import numpy as np
import pytest

from ensemble_bo.core.losses import (
    cv_loss_of_mean_ensembles,
    fold_weights,
    regression_loss,
    squared_error,
)


def test_fold_weights_average_the_fold_means():
    fold_ids = np.array([0, 0, 0, 1, 1, 2])
    losses = np.array([1.0, 2.0, 3.0, 10.0, 20.0, 7.0])
    # fold means 2, 15, 7 -> CV loss (2 + 15 + 7) / 3 = 8
    assert losses @ fold_weights(fold_ids) == pytest.approx(8.0)
    assert fold_weights(fold_ids).sum() == pytest.approx(1.0)


def test_squared_error_by_hand():
    np.testing.assert_array_equal(squared_error(np.array([-2.0, 0.5])), [4.0, 0.25])


def test_unknown_loss_is_named():
    with pytest.raises(ValueError, match="unknown regression loss 'mae'"):
        regression_loss("mae")


@pytest.mark.parametrize("member_count", [0, 1, 5])
def test_vectorized_ensemble_losses_equal_brute_force(member_count):
    rng = np.random.default_rng(member_count)
    n, t = 37, 23
    y = rng.normal(size=n)
    fold_ids = rng.integers(0, 5, size=n)
    pool = rng.normal(size=(t, n))
    members = rng.integers(0, t, size=member_count)
    member_sum = pool[members].sum(axis=0)

    vectorized = cv_loss_of_mean_ensembles(
        member_sum, member_count, pool, y, squared_error, fold_weights(fold_ids)
    )

    brute = []
    for h in range(t):
        prediction = np.mean(pool[[*members, h]], axis=0)
        fold_means = [
            np.mean((prediction[fold_ids == k] - y[fold_ids == k]) ** 2)
            for k in np.unique(fold_ids)
        ]
        brute.append(np.mean(fold_means))
    np.testing.assert_allclose(vectorized, brute, rtol=1e-12)
