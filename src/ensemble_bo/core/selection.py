"""Post-hoc ensembles from a pool: greedy selection with replacement, BFGS weights."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy.optimize import minimize
from scipy.special import softmax

from ensemble_bo.core.losses import cv_loss_of_mean_ensembles, fold_weights

PerSampleLoss = Callable[[np.ndarray], np.ndarray]


def check_problem(
    predictions: np.ndarray, y: np.ndarray, fold_ids: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """predictions (t, n), y (n,), fold_ids (n,) as arrays; ValueError naming a bad shape."""
    predictions = np.asarray(predictions, dtype=float)
    y = np.asarray(y, dtype=float)
    fold_ids = np.asarray(fold_ids)
    if predictions.ndim != 2 or predictions.shape[0] == 0 or predictions.shape[1] == 0:
        raise ValueError(
            f"predictions must have shape (t, n) with t, n >= 1, got {predictions.shape}"
        )
    n = predictions.shape[1]
    if y.shape != (n,):
        raise ValueError(f"y has shape {y.shape}, expected ({n},) to match predictions")
    if fold_ids.shape != (n,):
        raise ValueError(
            f"fold_ids has shape {fold_ids.shape}, expected ({n},) to match predictions"
        )
    if not np.all(np.isfinite(y)):
        raise ValueError("y contains NaN or infinite values")
    return predictions, y, fold_ids


def usable_rows(predictions: np.ndarray) -> np.ndarray:
    """(t,) mask of rows that are entirely finite; NaN rows are failed trials."""
    return np.all(np.isfinite(predictions), axis=1)


@dataclass(frozen=True)
class GreedySelection:
    """Result of greedy forward selection with replacement.

    path: (max_size,) pool index added at each step (warm start first);
    loss_curve: (max_size,) CV loss of the mean of path[: k + 1];
    size: length of the best prefix (the first minimum of loss_curve[warm_start - 1:]);
    members: (size,) that prefix, pool indices with repeats;
    weights: (t,) count of each pool index in `members` divided by size.
    """

    path: np.ndarray
    loss_curve: np.ndarray
    size: int
    members: np.ndarray
    weights: np.ndarray

    @property
    def loss(self) -> float:
        """CV loss of the returned ensemble."""
        return float(self.loss_curve[self.size - 1])


def greedy_selection_with_replacement(
    predictions: np.ndarray,
    y: np.ndarray,
    fold_ids: np.ndarray,
    per_sample_loss: PerSampleLoss,
    max_size: int = 50,
    warm_start: int = 0,
) -> GreedySelection:
    """Caruana et al. (2004) forward selection with replacement (SEGOR s.2.2).

    predictions: (t, n) out-of-fold predictions of the pool (NaN rows = failed
    trials, never chosen); y, fold_ids: (n,). The ensemble is the plain mean of
    its members. It starts from the `warm_start` individually best distinct models
    (SEGO s.2.1 uses 3, after Caruana's sorted initialization; fewer if fewer
    trials succeeded), then adds whichever pool member, possibly already in,
    lowers the CV loss most, until it holds `max_size` members. Ties go to the
    lowest pool index. Returns the best prefix with at least `warm_start` members.
    """
    predictions, y, fold_ids = check_problem(predictions, y, fold_ids)
    if int(max_size) != max_size or max_size < 1:
        raise ValueError(f"max_size must be a positive integer, got {max_size!r}")
    if int(warm_start) != warm_start or not 0 <= warm_start <= max_size:
        raise ValueError(
            f"warm_start must be an integer in [0, max_size={max_size}], got {warm_start!r}"
        )
    max_size, warm_start = int(max_size), int(warm_start)
    usable = np.flatnonzero(usable_rows(predictions))
    if usable.size == 0:
        raise ValueError("no usable pool member: every row of predictions is NaN")
    candidates = predictions[usable]
    weights = fold_weights(fold_ids)

    def losses_with_each(member_sum: np.ndarray, count: int) -> np.ndarray:
        losses = cv_loss_of_mean_ensembles(
            member_sum, count, candidates, y, per_sample_loss, weights
        )
        # A candidate whose loss overflows must not win, and argmin would pick NaN.
        return np.where(np.isfinite(losses), losses, np.inf)

    member_sum = np.zeros(predictions.shape[1])
    single = losses_with_each(member_sum, 0)
    # Stable sort: equal single losses keep pool order, as the greedy steps do.
    warm = np.argsort(single, kind="stable")[: min(warm_start, usable.size)]

    path = np.empty(max_size, dtype=int)
    curve = np.empty(max_size)
    for step in range(max_size):
        if step < warm.size:
            chosen = warm[step]
            loss = cv_loss_of_mean_ensembles(
                member_sum,
                step,
                candidates[chosen : chosen + 1],
                y,
                per_sample_loss,
                weights,
            )[0]
        else:
            step_losses = losses_with_each(member_sum, step)
            chosen = int(np.argmin(step_losses))
            loss = step_losses[chosen]
        member_sum += candidates[chosen]
        path[step] = usable[chosen]
        curve[step] = loss

    first = max(warm.size, 1) - 1
    size = first + int(np.argmin(curve[first:])) + 1
    members = path[:size].copy()
    member_weights = np.bincount(members, minlength=predictions.shape[0]) / size
    return GreedySelection(path, curve, size, members, member_weights)


def bfgs_weights(
    predictions_of_members: np.ndarray,
    y: np.ndarray,
    fold_ids: np.ndarray,
    per_sample_loss: PerSampleLoss,
    initial_weights: np.ndarray | None = None,
) -> np.ndarray:
    """Weights (m,) on the simplex minimizing the CV loss of sum_i w_i r_i (SEGOR s.3.3).

    predictions_of_members: (m, n), all finite; y, fold_ids: (n,). The weights are
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
            per_sample_loss(weights_of(free_logits) @ predictions - y) @ sample_weights
        )

    result = minimize(cv_loss, start[1:], method="BFGS")
    # BFGS can stop on a line-search failure; keep the start if it did not improve.
    best = result.x if result.fun <= cv_loss(start[1:]) else start[1:]
    return weights_of(best)
