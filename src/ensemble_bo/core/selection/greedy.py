"""Post-hoc ensembles from a pool: greedy selection with replacement, BFGS weights."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import softmax

from ensemble_bo.core.inference_budget import NOTHING_AFFORDABLE
from ensemble_bo.core.losses import (
    ROW_BLOCK,
    cv_loss_of_mean_ensembles,
    fold_weights,
    vote_winners,
)

PerSampleLoss = Callable[[np.ndarray], np.ndarray]


def check_problem(
    predictions: np.ndarray, y: np.ndarray, fold_ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """predictions (t, n), y (n,), fold_ids (n,) as arrays; ValueError naming a bad shape.

    Outputs with a class axis (probabilities) are (t, n, K) with y (n, K).
    """
    predictions = np.asarray(predictions, dtype=float)
    y = np.asarray(y, dtype=float)
    fold_ids = np.asarray(fold_ids)
    if predictions.ndim not in (2, 3) or 0 in predictions.shape[:2]:
        raise ValueError(
            "predictions must have shape (t, n) or (t, n, K) with t, n >= 1, got "
            f"{predictions.shape}"
        )
    n = predictions.shape[1]
    if y.shape != predictions.shape[1:]:
        raise ValueError(
            f"y has shape {y.shape}, expected {predictions.shape[1:]} to match predictions"
        )
    if fold_ids.shape != (n,):
        raise ValueError(
            f"fold_ids has shape {fold_ids.shape}, expected ({n},) to match predictions"
        )
    if not np.all(np.isfinite(y)):
        raise ValueError("y contains NaN or infinite values")
    return predictions, y, fold_ids


def usable_rows(predictions: np.ndarray) -> np.ndarray:
    """(t,) mask of rows that are entirely finite; NaN rows are failed trials."""
    return np.isfinite(predictions).reshape(len(predictions), -1).all(axis=1)


def weights_of_usable_rows(weights: np.ndarray, usable: np.ndarray) -> np.ndarray:
    """The weights (t,) of the usable rows; ValueError unless failed rows weigh 0."""
    weights = np.asarray(weights, dtype=float)
    if weights.shape != usable.shape or np.any(weights[~usable] != 0):
        raise ValueError(
            f"weights must have shape {usable.shape} and be 0 on failed rows "
            f"{np.flatnonzero(~usable).tolist()}"
        )
    return weights[usable]


def _n_classes(candidates: np.ndarray, labels: np.ndarray) -> int:
    """Classes 0..K-1 that the predicted and the true codes span: K."""
    return int(max(candidates.max(), labels.max())) + 1


@dataclass(frozen=True)
class GreedySelection:
    """Result of greedy forward selection with replacement.

    path: (max_size,) pool index added at each step (warm start first);
    loss_curve: (max_size,) CV loss of the mean of path[: k + 1];
    size: length of the best prefix (the first minimum of loss_curve[warm_start - 1:]);
    members: (size,) that prefix, pool indices with repeats;
    weights: (t,) count of each pool index in `members` divided by size;
    smallest_size: the shortest prefix that could be kept (the warm start's, or 1);
    skipped: steps whose best candidate `allowed` turned away.
    """

    path: np.ndarray
    loss_curve: np.ndarray
    size: int
    members: np.ndarray
    weights: np.ndarray
    smallest_size: int
    skipped: int = 0

    @property
    def loss(self) -> float:
        """CV loss of the returned ensemble."""
        return float(self.loss_curve[self.size - 1])


def _check_sizes(max_size: int, warm_start: int) -> tuple[int, int]:
    if int(max_size) != max_size or max_size < 1:
        raise ValueError(f"max_size must be a positive integer, got {max_size!r}")
    if int(warm_start) != warm_start or not 0 <= warm_start <= max_size:
        raise ValueError(
            f"warm_start must be an integer in [0, max_size={max_size}], got {warm_start!r}"
        )
    return int(max_size), int(warm_start)


Allowed = Callable[[list[int]], np.ndarray]


def _greedy_path(
    losses_with_each: Callable[[int], np.ndarray],
    add: Callable[[int], None],
    usable: np.ndarray,
    n_rows: int,
    max_size: int,
    warm_start: int,
    allowed: Allowed | None = None,
) -> GreedySelection:
    """The selection loop shared by the mean and the vote combiners.

    losses_with_each(step) -> (u,) CV loss of the ensemble so far plus each
    usable candidate; add(chosen) puts candidate `chosen` into the ensemble.
    allowed(members) -> (u,) bool: the candidates the ensemble of pool
    indices `members` may take (an inference budget); None: all. The warm
    start takes the best single models that fit, in order.
    """

    def finite(losses: np.ndarray) -> np.ndarray:
        # A candidate whose loss overflows must not win, and argmin would pick NaN.
        return np.where(np.isfinite(losses), losses, np.inf)

    def fitting(members: list[int]) -> np.ndarray:
        return np.ones(usable.size, bool) if allowed is None else allowed(members)

    single = finite(losses_with_each(0))
    # Stable sort: equal single losses keep pool order, as the greedy steps do.
    warm: list[int] = []
    fits = fitting([])
    for candidate in np.argsort(single, kind="stable"):
        if len(warm) == min(warm_start, usable.size):
            break
        if fits[candidate]:
            warm.append(int(candidate))
            # what the warm start may still take changes only when it grows
            fits = fitting([int(usable[w]) for w in warm])
    path = np.empty(max_size, dtype=int)
    curve = np.empty(max_size)
    skipped = 0
    for step in range(max_size):
        step_losses = single if step == 0 else finite(losses_with_each(step))
        if step < len(warm):
            chosen = warm[step]
        else:
            fits = fitting(path[:step].tolist())
            if not fits.any():
                raise ValueError(NOTHING_AFFORDABLE)
            chosen = int(np.argmin(np.where(fits, step_losses, np.inf)))
            skipped += int(chosen != int(np.argmin(step_losses)))
        curve[step] = step_losses[chosen]
        add(chosen)
        path[step] = usable[chosen]
    first = max(len(warm), 1) - 1
    size = first + int(np.argmin(curve[first:])) + 1
    members = path[:size].copy()
    member_weights = np.bincount(members, minlength=n_rows) / size
    return GreedySelection(
        path, curve, size, members, member_weights, first + 1, skipped
    )


def _usable(predictions: np.ndarray) -> np.ndarray:
    usable = np.flatnonzero(usable_rows(predictions))
    if usable.size == 0:
        raise ValueError("no usable pool member: every row of predictions is NaN")
    return usable


def greedy_selection_with_replacement(
    predictions: np.ndarray,
    y: np.ndarray,
    fold_ids: np.ndarray,
    per_sample_loss: PerSampleLoss,
    max_size: int = 50,
    warm_start: int = 0,
    allowed: Allowed | None = None,
) -> GreedySelection:
    """Caruana et al. (2004) forward selection with replacement (SEGOR s.2.2).

    predictions: (t, n) out-of-fold predictions of the pool (NaN rows = failed
    trials, never chosen), or (t, n, K) probabilities with y (n, K); y,
    fold_ids: (n,). The ensemble is the plain mean of
    its members. It starts from the `warm_start` individually best distinct models
    (SEGO s.2.1 uses 3, after Caruana's sorted initialization; fewer if fewer
    trials succeeded), then adds whichever pool member, possibly already in,
    lowers the CV loss most, until it holds `max_size` members. Ties go to the
    lowest pool index. Returns the best prefix with at least `warm_start` members.
    `allowed`: the candidates each step may take (_greedy_path).
    """
    predictions, y, fold_ids = check_problem(predictions, y, fold_ids)
    max_size, warm_start = _check_sizes(max_size, warm_start)
    usable = _usable(predictions)
    candidates = predictions[usable]
    weights = fold_weights(fold_ids)
    member_sum = np.zeros(predictions.shape[1:])

    def losses_with_each(step: int) -> np.ndarray:
        return cv_loss_of_mean_ensembles(
            member_sum, step, candidates, y, per_sample_loss, weights
        )

    def add(chosen: int) -> None:
        member_sum[:] += candidates[chosen]

    return _greedy_path(
        losses_with_each,
        add,
        usable,
        len(predictions),
        max_size,
        warm_start,
        _on_usable(allowed, usable),
    )


def _on_usable(allowed: Allowed | None, usable: np.ndarray) -> Allowed | None:
    """`allowed` (a mask over the pool) as a mask over the usable rows."""
    if allowed is None:
        return None
    return lambda members: allowed(members)[usable]


def plurality_vote_cv_errors(
    votes: np.ndarray,
    candidate_labels: np.ndarray,
    labels: np.ndarray,
    sample_weights: np.ndarray,
) -> np.ndarray:
    """CV error (t,) of the plurality vote after one more vote from each candidate.

    votes: (n, K) votes the ensemble gives each class so far; candidate_labels:
    (t, n) integer class codes in [0, K) (a pool checks them once per trial);
    labels: (n,) true codes; sample_weights: (n,) from `fold_weights`. Ties go
    to the lowest class index, as WeightedVoteClassifier breaks them. Hand-written because the vote, unlike a
    mean, is not linear in the members. One more vote changes only its class's
    count, so row i's outcome depends on the class c voted alone: the new
    winner is c if it overtakes the current top count, the lower index of the
    two if it ties it, else the current winner. That (n, K) table of 0/1 errors
    is built once; a candidate's error is its n cells, gathered, times the
    sample weights. O(n K + t n), in row blocks.
    """
    n_samples, n_classes = votes.shape
    top = votes.max(axis=1, keepdims=True)
    first_top = votes.argmax(axis=1)[:, None]  # argmax takes the lowest index of ties
    classes = np.arange(n_classes)
    new_count = votes + 1
    winner = np.where(
        new_count > top,
        classes,
        np.where(new_count == top, np.minimum(classes, first_top), first_top),
    )
    cell_errors = (winner != labels[:, None]).astype(float).ravel()
    # int32 keeps the (block, n) index temporaries small; any code type is cast.
    index = np.int32 if n_samples * n_classes < 2**31 else np.int64
    row_starts = np.arange(n_samples, dtype=index) * n_classes
    errors = np.empty(len(candidate_labels))
    for start in range(0, len(candidate_labels), ROW_BLOCK):
        block = candidate_labels[start : start + ROW_BLOCK].astype(index, copy=False)
        errors[start : start + ROW_BLOCK] = (
            cell_errors[block + row_starts] @ sample_weights
        )
    return errors


def greedy_vote_selection(
    predicted_labels: np.ndarray,
    labels: np.ndarray,
    fold_ids: np.ndarray,
    max_size: int = 50,
    warm_start: int = 0,
    allowed: Allowed | None = None,
) -> GreedySelection:
    """Greedy forward selection with replacement for a majority vote (SEGO eq. 3-4).

    predicted_labels: (t, n) out-of-fold class codes of the pool (NaN rows =
    failed trials); labels, fold_ids: (n,). Each step adds the member whose
    extra vote gives the lowest CV zero-one error of the plurality vote; the
    rest is as in `greedy_selection_with_replacement`.
    """
    predicted_labels, labels, fold_ids = check_problem(
        predicted_labels, labels, fold_ids
    )
    max_size, warm_start = _check_sizes(max_size, warm_start)
    usable = _usable(predicted_labels)
    candidates = predicted_labels[usable].astype(int)
    labels = labels.astype(int)
    votes = np.zeros((len(labels), _n_classes(candidates, labels)))
    weights = fold_weights(fold_ids)
    rows = np.arange(len(labels))

    def losses_with_each(step: int) -> np.ndarray:
        return plurality_vote_cv_errors(votes, candidates, labels, weights)

    def add(chosen: int) -> None:
        votes[rows, candidates[chosen]] += 1

    return _greedy_path(
        losses_with_each,
        add,
        usable,
        len(predicted_labels),
        max_size,
        warm_start,
        _on_usable(allowed, usable),
    )


def bagged_selection(
    predictions: np.ndarray,
    y: np.ndarray,
    fold_ids: np.ndarray,
    per_sample_loss: PerSampleLoss | None,
    n_bags: int = 20,
    max_size: int = 25,
    seed: int = 0,
    allowed: Allowed | None = None,
) -> np.ndarray:
    """Weights (t,) of greedy selection bagged over bootstrap resamples of the rows.

    Each of `n_bags` bags draws n rows with replacement (numpy's seeded
    generator) and runs greedy selection with replacement on them alone,
    `max_size` steps, keeping its best prefix; the weights are the mean of the
    bags' weights. Caruana et al. (2006) bag the models, to keep one
    selection from overfitting the rows it is chosen on; resampling the rows
    instead averages over the chance that each ensemble is the best one, as
    agnostic Bayes does for single models (Lacoste et al. 2014). No library
    selects ensembles, hence by hand. predictions: (t, n) or (t, n, K) as in
    greedy_selection_with_replacement, with y (n,) or (n, K); per_sample_loss
    None: the plurality vote's error on class codes (greedy_vote_selection).
    """
    predictions, y, fold_ids = check_problem(predictions, y, fold_ids)
    if int(n_bags) != n_bags or n_bags < 1:
        raise ValueError(f"n_bags must be a positive integer, got {n_bags!r}")
    rng = np.random.default_rng(seed)
    n = predictions.shape[1]
    weights = np.zeros(len(predictions))
    for _ in range(int(n_bags)):
        rows = rng.integers(0, n, n)
        if per_sample_loss is None:
            selection = greedy_vote_selection(
                predictions[:, rows], y[rows], fold_ids[rows], max_size, 0, allowed
            )
        else:
            selection = greedy_selection_with_replacement(
                predictions[:, rows],
                y[rows],
                fold_ids[rows],
                per_sample_loss,
                max_size,
                0,
                allowed,
            )
        weights += selection.weights
    return weights / n_bags


def weighted_vote_cv_error(
    predicted_labels: np.ndarray, labels: np.ndarray, fold_ids: np.ndarray
) -> Callable[[np.ndarray], float]:
    """weights (t,) -> CV zero-one error of the weighted plurality vote of the pool.

    The classification counterpart of agnostic_bayes.mean_ensemble_cv_loss (AB
    s.2, eq. 1: the ensemble votes with the posterior weights). predicted_labels
    (t, n) are out-of-fold class codes; failed (NaN) rows must get weight 0.
    Ties go to the lowest class index.
    """
    predicted_labels, labels, fold_ids = check_problem(
        predicted_labels, labels, fold_ids
    )
    usable = usable_rows(predicted_labels)
    candidates = predicted_labels[usable].astype(int)
    labels = labels.astype(int)
    classes = np.arange(_n_classes(candidates, labels))
    sample_weights = fold_weights(fold_ids)

    def cv_error(weights: np.ndarray) -> float:
        weights = weights_of_usable_rows(weights, usable)
        # (n, K) weighted votes per class
        votes = np.stack([weights @ (candidates == k) for k in classes], axis=1)
        return float((vote_winners(votes) != labels) @ sample_weights)

    return cv_error


def bfgs_weights(
    predictions_of_members: np.ndarray,
    y: np.ndarray,
    fold_ids: np.ndarray,
    per_sample_loss: PerSampleLoss,
    initial_weights: np.ndarray | None = None,
) -> np.ndarray:
    """Weights (m,) on the simplex minimizing the CV loss of sum_i w_i r_i (SEGOR s.3.3).

    predictions_of_members: (m, n) or (m, n, K), all finite; y: (n,) or (n, K);
    fold_ids: (n,). The weights are
    softmax(z) with z[0] fixed at 0 (softmax is shift-invariant, so m - 1 logits
    identify the weights), which keeps them positive and summing to 1 while BFGS
    runs unconstrained; gradients are scipy's finite differences because the loss
    is any per-sample callable. Starts from `initial_weights` (all > 0; default
    equal weights, the mean ensemble), so the result is deterministic and never
    worse than the start.
    """
    predictions, y, fold_ids = check_problem(predictions_of_members, y, fold_ids)
    if not usable_rows(predictions).all():
        raise ValueError(
            "predictions_of_members contains NaN or infinite values in rows "
            f"{np.flatnonzero(~usable_rows(predictions)).tolist()}"
        )
    m = predictions.shape[0]
    if initial_weights is None:
        start = np.zeros(m)
    else:
        initial_weights = np.asarray(initial_weights, dtype=float)
        if initial_weights.shape != (m,) or not np.all(initial_weights > 0):
            raise ValueError(
                f"initial_weights must be ({m},) and all positive, got {initial_weights!r}"
            )
        start = np.log(initial_weights) - np.log(initial_weights[0])
    if m == 1:
        return np.ones(1)
    sample_weights = fold_weights(fold_ids)

    def weights_of(free_logits: np.ndarray) -> np.ndarray:
        return softmax(np.concatenate(([0.0], free_logits)))

    def cv_loss(free_logits: np.ndarray) -> float:
        return float(
            per_sample_loss(
                np.tensordot(weights_of(free_logits), predictions, axes=1) - y
            )
            @ sample_weights
        )

    result = minimize(cv_loss, start[1:], method="BFGS")
    # BFGS can stop on a line-search failure; keep the start if it did not improve.
    best = result.x if result.fun <= cv_loss(start[1:]) else start[1:]
    return weights_of(best)
