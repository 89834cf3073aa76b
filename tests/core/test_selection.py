import numpy as np
import pytest

from ensemble_bo.core.losses import fold_weights, huber_loss, squared_error
from ensemble_bo.core.selection.greedy import (
    bagged_selection,
    bfgs_weights,
    greedy_selection_with_replacement,
    greedy_vote_selection,
    plurality_vote_cv_errors,
    weighted_vote_cv_error,
)


def cv_loss_by_hand(prediction, y, fold_ids, loss):
    """Mean over folds of each fold's mean loss, written out."""
    return np.mean(
        [
            np.mean(loss(prediction[fold_ids == k] - y[fold_ids == k]))
            for k in np.unique(fold_ids)
        ]
    )


def caruana_by_hand(pool, y, fold_ids, loss, max_size, warm_start=0):
    """Caruana et al. (2004) with replacement, one candidate at a time."""
    singles = [cv_loss_by_hand(pool[h], y, fold_ids, loss) for h in range(len(pool))]
    members = sorted(range(len(pool)), key=lambda h: (singles[h], h))[:warm_start]
    curve = [
        cv_loss_by_hand(np.mean(pool[members[: k + 1]], axis=0), y, fold_ids, loss)
        for k in range(len(members))
    ]
    while len(members) < max_size:
        best_h, best_loss = None, np.inf
        for h in range(len(pool)):
            candidate_loss = cv_loss_by_hand(
                np.mean(pool[[*members, h]], axis=0), y, fold_ids, loss
            )
            if candidate_loss < best_loss:
                best_h, best_loss = h, candidate_loss
        members.append(best_h)
        curve.append(best_loss)
    return members, curve


@pytest.mark.parametrize(
    ("loss", "warm_start", "seed"),
    [
        (squared_error, 0, 0),
        (huber_loss, 0, 1),
        (squared_error, 3, 2),
        (huber_loss, 2, 3),
    ],
)
def test_greedy_matches_a_brute_force_reading_of_caruana(loss, warm_start, seed):
    rng = np.random.default_rng(seed)
    n, t = 30, 7
    y = rng.normal(size=n)
    fold_ids = rng.integers(0, 4, size=n)  # unequal folds
    pool = y + rng.normal(scale=rng.uniform(0.5, 2.0, size=(t, 1)), size=(t, n))

    result = greedy_selection_with_replacement(
        pool, y, fold_ids, loss, max_size=12, warm_start=warm_start
    )

    members, curve = caruana_by_hand(pool, y, fold_ids, loss, 12, warm_start)
    np.testing.assert_array_equal(result.path, members)
    np.testing.assert_allclose(result.loss_curve, curve, rtol=1e-12)
    first = max(warm_start, 1) - 1
    best_size = first + int(np.argmin(curve[first:])) + 1
    assert result.size == best_size
    np.testing.assert_array_equal(result.members, members[:best_size])
    assert result.loss == pytest.approx(min(curve[first:]))
    np.testing.assert_allclose(
        result.weights, np.bincount(members[:best_size], minlength=t) / best_size
    )


def test_selection_with_replacement_picks_a_model_twice_and_returns_the_best_prefix():
    # y = 0; A predicts +1, B predicts -2: mean(A, A, B) = 0 exactly.
    # Step 1: A (loss 1 < 4); step 2: B (0.25 < 1); step 3: A again (0).
    n = 10
    pool = np.vstack([np.ones(n), -2 * np.ones(n), 5 * np.ones(n)])
    result = greedy_selection_with_replacement(
        pool, np.zeros(n), np.arange(n) % 2, squared_error, max_size=5
    )
    np.testing.assert_array_equal(result.path[:3], [0, 1, 0])
    np.testing.assert_allclose(result.loss_curve[:3], [1.0, 0.25, 0.0])
    np.testing.assert_allclose(result.loss_curve[3:], [1 / 16, 1 / 25])  # worse again
    assert result.size == 3
    np.testing.assert_array_equal(result.members, [0, 1, 0])
    np.testing.assert_allclose(result.weights, [2 / 3, 1 / 3, 0.0])
    assert result.loss == 0.0


def test_warm_start_takes_the_k_best_single_models_first_and_keeps_them():
    # Single losses: model 3 < 1 < 0 < 2 ... ; alone, model 3 is exact, so without
    # a warm start the best ensemble is [3]; with warm_start=3 it keeps >= 3 members.
    n = 8
    y = np.zeros(n)
    pool = np.vstack(
        [
            1.5 * np.ones(n),
            -1.0 * np.ones(n),
            3.0 * np.ones(n),
            np.zeros(n),
            2.0 * np.ones(n),
        ]
    )
    cold = greedy_selection_with_replacement(
        pool, y, np.arange(n) % 2, squared_error, 5
    )
    assert cold.size == 1 and cold.members.tolist() == [3]

    warm = greedy_selection_with_replacement(
        pool, y, np.arange(n) % 2, squared_error, 5, warm_start=3
    )
    np.testing.assert_array_equal(warm.path[:3], [3, 1, 0])
    assert warm.size >= 3
    np.testing.assert_array_equal(warm.members[:3], [3, 1, 0])
    # the warm prefix's losses are those of its means: 0, (-1/2)^2, (1/6)^2
    np.testing.assert_allclose(warm.loss_curve[:3], [0.0, 0.25, 1 / 36])


def test_failed_trials_are_never_chosen():
    rng = np.random.default_rng(5)
    n = 20
    y = rng.normal(size=n)
    pool = y + rng.normal(scale=0.3, size=(6, n))
    pool[[0, 4]] = np.nan  # failed trials, including the first row
    result = greedy_selection_with_replacement(
        pool, y, np.arange(n) % 4, squared_error, max_size=15, warm_start=3
    )
    assert not np.isin(result.path, [0, 4]).any()
    assert result.weights[[0, 4]].tolist() == [0.0, 0.0]
    assert result.weights.sum() == pytest.approx(1.0)
    assert np.all(np.isfinite(result.loss_curve))


def test_warm_start_larger_than_the_usable_pool_uses_every_usable_model():
    n = 6
    pool = np.vstack([np.full(n, np.nan), np.ones(n), 2 * np.ones(n)])
    result = greedy_selection_with_replacement(
        pool, np.zeros(n), np.arange(n) % 2, squared_error, max_size=4, warm_start=3
    )
    np.testing.assert_array_equal(result.path[:2], [1, 2])


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"predictions": np.ones(5)}, "predictions must have shape"),
        ({"y": np.zeros(4)}, "y has shape"),
        ({"fold_ids": np.zeros(3)}, "fold_ids has shape"),
        ({"predictions": np.full((2, 5), np.nan)}, "no usable pool member"),
        ({"max_size": 0}, "max_size must be a positive integer"),
        ({"max_size": 2.5}, "max_size must be a positive integer"),
        ({"warm_start": 4}, "warm_start must be an integer in"),
        ({"warm_start": -1}, "warm_start must be an integer in"),
    ],
)
def test_greedy_rejects_bad_inputs(kwargs, message):
    arguments = {
        "predictions": np.ones((2, 5)),
        "y": np.zeros(5),
        "fold_ids": np.arange(5) % 2,
        "per_sample_loss": squared_error,
        "max_size": 3,
    }
    with pytest.raises(ValueError, match=message):
        greedy_selection_with_replacement(**{**arguments, **kwargs})


# ------------------------------------------------------------------ BFGS weights


def test_bfgs_weights_find_the_hand_optimum():
    # members y + 1 and y - 3: 0.75 * 1 + 0.25 * (-3) = 0, the only zero-loss weights
    y = np.linspace(-1, 1, 12)
    members = np.vstack([y + 1.0, y - 3.0])
    weights = bfgs_weights(members, y, np.arange(12) % 3, squared_error)
    np.testing.assert_allclose(weights, [0.75, 0.25], atol=1e-4)


def test_bfgs_weights_beat_equal_weights_when_one_member_is_clearly_better():
    rng = np.random.default_rng(7)
    n = 60
    y = np.sin(np.linspace(0, 6, n))
    fold_ids = np.arange(n) % 5
    members = np.vstack(
        [
            y + rng.normal(scale=0.05, size=n),  # clearly better
            y + 0.8 + rng.normal(scale=0.3, size=n),
            rng.normal(size=n),
        ]
    )
    weights = bfgs_weights(members, y, fold_ids, huber_loss)

    assert weights.sum() == pytest.approx(1.0)
    assert np.all(weights >= 0)
    assert np.argmax(weights) == 0 and weights[0] > 0.8

    def cv_loss(w):
        return cv_loss_by_hand(w @ members, y, fold_ids, huber_loss)

    assert cv_loss(weights) < 0.5 * cv_loss(np.full(3, 1 / 3))
    np.testing.assert_array_equal(
        weights, bfgs_weights(members, y, fold_ids, huber_loss)
    )


def test_bfgs_weights_single_member_and_bad_inputs():
    y = np.zeros(4)
    np.testing.assert_array_equal(
        bfgs_weights(np.ones((1, 4)), y, np.arange(4) % 2, squared_error), [1.0]
    )
    members = np.ones((2, 4))
    members[1, 2] = np.nan
    with pytest.raises(ValueError, match=r"NaN or infinite values in rows \[1\]"):
        bfgs_weights(members, y, np.arange(4) % 2, squared_error)
    with pytest.raises(ValueError, match="initial_weights"):
        bfgs_weights(
            np.ones((2, 4)), y, np.arange(4) % 2, squared_error, np.array([1.0, 0.0])
        )


def test_bfgs_weights_start_from_given_weights():
    y = np.linspace(-1, 1, 12)
    members = np.vstack([y + 1.0, y - 3.0, y + 2.0])
    weights = bfgs_weights(
        members,
        y,
        np.arange(12) % 3,
        squared_error,
        initial_weights=np.array([0.5, 0.3, 0.2]),
    )
    assert weights @ members == pytest.approx(y, abs=1e-3)


def brute_force_vote_error(rows, labels, folds):
    """Plurality vote of `rows` (members x n codes), ties to the lowest class, then
    the mean over folds of each fold's error rate (SEGO eq. 4 per fold)."""
    n_classes = int(max(np.max(rows), labels.max())) + 1
    winners = []
    for i in range(len(labels)):
        counts = [sum(1 for row in rows if row[i] == k) for k in range(n_classes)]
        winners.append(counts.index(max(counts)))
    wrong = np.array(winners) != labels
    return np.mean([wrong[folds == k].mean() for k in np.unique(folds)])


def test_plurality_vote_errors_by_hand():
    # 3 samples, 3 classes; the ensemble so far voted (2, 1, 0), (0, 1, 1), (1, 1, 0)
    votes = np.array([[2, 1, 0], [0, 1, 1], [1, 1, 0]], dtype=float)
    labels = np.array([1, 2, 1])
    candidates = np.array([[1, 2, 1], [0, 1, 0]])
    weights = np.full(3, 1 / 3)
    # candidate 0: sample 0 -> (2, 2, 0) tie -> class 0, wrong; sample 1 -> (0, 1, 2)
    # -> 2, right; sample 2 -> (1, 2, 0) -> 1, right: error 1/3. Candidate 1:
    # (3, 1, 0) -> 0 wrong; (0, 2, 1) -> 1 wrong; (2, 1, 0) -> 0 wrong: error 1.
    np.testing.assert_allclose(
        plurality_vote_cv_errors(votes, candidates, labels, weights), [1 / 3, 1.0]
    )


@pytest.mark.parametrize("dtype", [np.int16, np.int32, np.int64])
def test_plurality_vote_errors_match_a_recount_of_every_vote(dtype):
    # More candidates than one row block (ROW_BLOCK = 32), in the pool's int32
    # codes and in other integer types: each candidate's error equals adding its
    # vote to the members' and recounting from scratch.
    rng = np.random.default_rng(5)
    labels = rng.integers(0, 4, size=40)
    folds = np.arange(40) % 5
    members = rng.integers(0, 4, size=(5, 40))
    candidates = rng.integers(0, 4, size=(70, 40))
    votes = np.zeros((40, 4))
    for member in members:
        votes[np.arange(40), member] += 1
    expected = [
        brute_force_vote_error(np.vstack([members, candidate]), labels, folds)
        for candidate in candidates
    ]
    np.testing.assert_allclose(
        plurality_vote_cv_errors(
            votes, candidates.astype(dtype), labels, fold_weights(folds)
        ),
        expected,
    )


def test_greedy_vote_selection_matches_a_brute_force_reading_of_sego_eq_3_4():
    rng = np.random.default_rng(3)
    labels = rng.integers(0, 3, size=30)
    folds = np.arange(30) % 5
    pool = np.where(rng.random((8, 30)) < 0.35, rng.integers(0, 3, (8, 30)), labels)
    pool = pool.astype(float)
    pool[5] = np.nan  # a failed trial is never chosen
    selection = greedy_vote_selection(pool, labels, folds, max_size=6, warm_start=3)
    usable = [h for h in range(8) if h != 5]
    singles = sorted(
        usable, key=lambda h: (brute_force_vote_error([pool[h]], labels, folds), h)
    )
    members = singles[:3]
    curve = [
        brute_force_vote_error(pool[members[:k]], labels, folds) for k in (1, 2, 3)
    ]
    while len(members) < 6:
        losses = [
            (brute_force_vote_error(pool[[*members, h]], labels, folds), h)
            for h in usable
        ]
        loss, best = min(losses)
        members.append(best)
        curve.append(loss)
    np.testing.assert_array_equal(selection.path, members)
    np.testing.assert_allclose(selection.loss_curve, curve)
    best_prefix = 2 + int(np.argmin(curve[2:])) + 1
    assert selection.size == best_prefix


def test_a_weighted_vote_tied_in_whole_counts_goes_to_the_lowest_class():
    # Counts 3, 1 + 2, 3 and 1 of 10 tie classes 0, 1 and 2; as floats class 1
    # sums to 0.30000000000000004 > 0.3. The vote, like WeightedVoteClassifier,
    # gives the tie to class 0.
    pool = np.array([[0.0], [1.0], [1.0], [2.0], [3.0]])
    weights = np.array([0.3, 0.1, 0.2, 0.3, 0.1])
    assert weights[1] + weights[2] > weights[0]
    error = weighted_vote_cv_error(pool, np.array([0]), np.array([0]))
    assert error(weights) == 0.0


def test_weighted_vote_cv_error_by_hand():
    pool = np.array([[0, 1, 1, 2], [0, 0, 1, 1], [2, 1, 0, 2], [np.nan] * 4])
    labels = np.array([0, 1, 1, 2])
    folds = np.array([0, 0, 1, 1])
    error = weighted_vote_cv_error(pool, labels, folds)
    # row 0 alone is right everywhere
    assert error(np.array([1.0, 0, 0, 0])) == 0.0
    # 0.3 / 0.3 / 0.4: sample 0 -> class 0 (0.6) right; sample 1 -> class 1 (0.7) right;
    # sample 2 -> class 1 (0.6) right; sample 3 -> class 2 (0.7) right
    assert error(np.array([0.3, 0.3, 0.4, 0.0])) == 0.0
    # 0.1 / 0.3 / 0.6: sample 0 -> class 2 (0.6) wrong, sample 1 -> 1 (0.7) right,
    # sample 2 -> 0 (0.6) wrong, sample 3 -> 2 (0.7) right: 1/2 in each fold
    assert error(np.array([0.1, 0.3, 0.6, 0.0])) == 0.5
    # 0.2 / 0.3 / 0.5 ties classes 0 and 2 on sample 0 and 0 and 1 on sample 2:
    # the lowest class wins, right on sample 0, wrong on sample 2
    assert error(np.array([0.2, 0.3, 0.5, 0.0])) == 0.25
    with pytest.raises(ValueError, match=r"be 0 on failed rows \[3\]"):
        error(np.array([0.5, 0.0, 0.0, 0.5]))


def bagged_by_hand(pool, y, fold_ids, loss, n_bags, max_size, seed):
    """The mean over bags of Caruana's prefix on n rows drawn with replacement."""
    rng = np.random.default_rng(seed)
    weights = np.zeros(len(pool))
    for _ in range(n_bags):
        rows = rng.integers(0, len(y), len(y))
        members, curve = caruana_by_hand(
            pool[:, rows], y[rows], fold_ids[rows], loss, max_size
        )
        kept = members[: int(np.argmin(curve)) + 1]
        weights += np.bincount(kept, minlength=len(pool)) / len(kept)
    return weights / n_bags


def test_bagged_selection_averages_greedy_over_bootstrap_resamples_of_the_rows():
    rng = np.random.default_rng(4)
    y = rng.normal(size=30)
    pool = y + rng.normal(scale=[[0.4], [0.6], [0.8], [1.0], [0.5]], size=(5, 30))
    fold_ids = np.arange(30) % 3
    weights = bagged_selection(pool, y, fold_ids, squared_error, 4, 6, seed=7)
    expected = bagged_by_hand(pool, y, fold_ids, squared_error, 4, 6, 7)
    np.testing.assert_allclose(weights, expected)
    assert weights.sum() == pytest.approx(1.0)
    # the bags disagree: more than one model keeps weight, unlike one selection
    single = greedy_selection_with_replacement(pool, y, fold_ids, squared_error, 6)
    assert np.count_nonzero(weights) > np.count_nonzero(single.weights)
    # the same seed gives the same weights, another seed other bags
    np.testing.assert_array_equal(
        weights, bagged_selection(pool, y, fold_ids, squared_error, 4, 6, seed=7)
    )
    assert not np.array_equal(
        weights, bagged_selection(pool, y, fold_ids, squared_error, 4, 6, seed=8)
    )


def test_a_model_exact_on_every_row_takes_every_bag():
    rng = np.random.default_rng(5)
    y = rng.normal(size=20)
    pool = np.stack([y + 1.0, y.copy(), y - 0.5 + rng.normal(size=20)])
    weights = bagged_selection(pool, y, np.arange(20) % 4, squared_error, 10, 5)
    np.testing.assert_array_equal(weights, [0.0, 1.0, 0.0])


def test_bagged_vote_selection_averages_the_vote_s_greedy_and_skips_failed_trials():
    rng = np.random.default_rng(6)
    labels = rng.integers(0, 3, 24)
    pool = np.where(rng.random((4, 24)) < 0.7, labels, (labels + 1) % 3).astype(float)
    pool[2] = np.nan  # a failed trial
    fold_ids = np.arange(24) % 4
    weights = bagged_selection(pool, labels, fold_ids, None, 3, 4, seed=2)
    rng = np.random.default_rng(2)
    expected = np.zeros(4)
    for _ in range(3):
        rows = rng.integers(0, 24, 24)
        expected += greedy_vote_selection(
            pool[:, rows], labels[rows], fold_ids[rows], 4
        ).weights
    np.testing.assert_allclose(weights, expected / 3)
    assert weights[2] == 0.0 and weights.sum() == pytest.approx(1.0)


@pytest.mark.parametrize("n_bags", [0, 2.5, -1])
def test_bagged_selection_refuses_a_bad_number_of_bags(n_bags):
    y = np.zeros(6)
    with pytest.raises(
        ValueError, match=f"n_bags must be a positive integer, got {n_bags}"
    ):
        bagged_selection(np.zeros((2, 6)), y, np.arange(6) % 2, squared_error, n_bags)
