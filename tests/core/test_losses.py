import numpy as np
import pytest

from ensemble_bo.core.losses import (
    HUBER_C,
    TUKEY_C,
    cv_loss_of_mean_ensembles,
    fold_weights,
    huber_loss,
    objective,
    regression_loss,
    squared_error,
    tukey_bisquare_loss,
    zero_one_loss,
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


# ---- robust regression losses (SEGOR s.3.1) and SEGO's margin losses --------------


def test_huber_by_hand_inside_outside_and_at_c():
    residuals = np.array([0.5, -0.5, 2.0, -3.0, HUBER_C, -HUBER_C])
    expected = [
        0.125,  # 0.5**2 / 2
        0.125,
        1.345 * (2.0 - 1.345 / 2),  # 1.7854875
        1.345 * (3.0 - 1.345 / 2),  # 3.1303875
        1.345**2 / 2,  # both branches meet at |r| = c
        1.345**2 / 2,
    ]
    np.testing.assert_allclose(huber_loss(residuals), expected, rtol=1e-12)
    np.testing.assert_allclose(huber_loss(np.array([3.0, 0.2]), c=1.0), [2.5, 0.02])


def test_tukey_by_hand_inside_outside_and_at_c():
    # c = 2: c**2/6 = 2/3; r = 1: (r/c)**2 = 1/4, 1 - (3/4)**3 = 37/64 -> 37/96
    np.testing.assert_allclose(
        tukey_bisquare_loss(np.array([1.0, -1.0, 2.0, -2.0, 5.0, 0.0]), c=2.0),
        [37 / 96, 37 / 96, 2 / 3, 2 / 3, 2 / 3, 0.0],
        rtol=1e-12,
    )
    assert tukey_bisquare_loss(np.array([10.0]))[0] == pytest.approx(4.685**2 / 6)
    assert TUKEY_C == 4.685 and HUBER_C == 1.345


@pytest.mark.parametrize("loss", [huber_loss, tukey_bisquare_loss])
def test_robust_losses_are_half_squared_error_near_zero(loss):
    r = np.array([1e-4, -3e-4, 1e-3])
    np.testing.assert_allclose(loss(r), r**2 / 2, rtol=1e-6)


def test_robust_losses_are_registered_and_work_in_ensemble_losses():
    assert regression_loss("huber") is huber_loss
    assert regression_loss("tukey") is tukey_bisquare_loss
    rng = np.random.default_rng(3)
    y, pool = rng.normal(size=12), 3 * rng.normal(size=(4, 12))
    fold_ids = np.arange(12) % 3
    vectorized = cv_loss_of_mean_ensembles(
        pool[0] + pool[1], 2, pool, y, tukey_bisquare_loss, fold_weights(fold_ids)
    )
    brute = [
        np.mean(
            [
                np.mean(
                    tukey_bisquare_loss((pool[[0, 1, h]].mean(0) - y)[fold_ids == k])
                )
                for k in range(3)
            ]
        )
        for h in range(4)
    ]
    np.testing.assert_allclose(vectorized, brute, rtol=1e-12)


@pytest.mark.parametrize("c", [0.0, -1.0, np.nan])
def test_robust_losses_reject_bad_constants(c):
    with pytest.raises(ValueError, match="tuning constant c"):
        huber_loss(np.ones(2), c=c)
    with pytest.raises(ValueError, match="tuning constant c"):
        tukey_bisquare_loss(np.ones(2), c=c)


def test_zero_one_loss_by_hand():
    predicted = np.array([[0, 1, 2], [2, 1, 0]])
    np.testing.assert_array_equal(
        zero_one_loss(predicted, np.array([0, 1, 0])), [[0, 0, 1], [1, 0, 0]]
    )


def test_vote_losses_are_sego_eq_8_and_9_by_hand():
    # 3 members per sample: all right, all wrong, 2 of 3 right. SEGO eq. 7 margins
    # M = 1, -1, 1/3; eq. 8 (1 - M) / 2 = 0, 1, 1/3; eq. 9 (1 - M)**2 / 4 = 0, 1, 1/9.
    correct = np.array([[1, 0, 1], [1, 0, 1], [1, 0, 0]], dtype=float)  # (m, n)
    residuals = correct.mean(axis=0) - 1.0
    margin = objective("classification", "margin").per_sample_loss
    squared_margin = objective("classification", "squared_margin").per_sample_loss
    np.testing.assert_allclose(margin(residuals), [0.0, 1.0, 1 / 3])
    np.testing.assert_allclose(squared_margin(residuals), [0.0, 1.0, 1 / 9])
    assert objective("classification", "auto").per_sample_loss is squared_margin


def test_vote_losses_follow_eq7_on_random_member_correctness():
    correct = np.random.default_rng(0).random((5, 40)) < 0.6  # (m, n)
    eq7 = np.mean(1 - 2 * (~correct), axis=0)  # M, literally as SEGO writes it
    residuals = correct.mean(axis=0) - 1.0
    np.testing.assert_allclose(
        objective("classification", "squared_margin").per_sample_loss(residuals),
        (1 - eq7) ** 2 / 4,
    )
    # a single member's loss is its zero-one loss, under both
    single = correct[0].astype(float) - 1.0
    for name in ("squared_margin", "margin", "error"):
        np.testing.assert_allclose(
            objective("classification", name).per_sample_loss(single), 1.0 - correct[0]
        )


def test_objective_by_task_and_bad_names():
    assert objective("regression", "auto").per_sample_loss is squared_error
    assert objective("regression", "h").per_sample_loss is huber_loss
    with pytest.raises(ValueError, match="'hinge' does not apply to classification"):
        objective("classification", "hinge")
    with pytest.raises(ValueError, match="'mse' does not apply to classification"):
        objective("classification", "mse")
    with pytest.raises(ValueError, match="unknown task 'ranking'"):
        objective("ranking", "auto")
    with pytest.raises(ValueError, match="unknown regression loss 'brier'"):
        objective("regression", "brier")
