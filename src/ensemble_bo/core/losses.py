"""Per-sample losses and the cross-validated loss of out-of-fold predictions."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.special import huber

# SEGOR s.3.1: both constants give >= 95% of least squares' efficiency under
# normal errors of unit scale. The pipelines apply them to residuals of the
# standardized target (SEGOR s.4 normalizes the values), not to residuals
# rescaled by their own spread: with good models most residuals are then well
# inside c and the robust losses act only on the large ones.
HUBER_C = 1.345
TUKEY_C = 4.685


def squared_error(residuals: np.ndarray) -> np.ndarray:
    """Per-sample squared error r**2, elementwise on any shape."""
    return np.square(residuals)


def _check_tuning_constant(c: float) -> float:
    if not np.isfinite(c) or c <= 0:
        raise ValueError(f"tuning constant c must be positive and finite, got {c!r}")
    return float(c)


def huber_loss(residuals: np.ndarray, c: float = HUBER_C) -> np.ndarray:
    """SEGOR s.3.1 Huber loss: r**2/2 if |r| < c, else c (|r| - c/2); any shape.

    The two branches agree at |r| = c, so scipy's `huber` (which puts |r| = c
    in the quadratic branch) is the same function. c is in residual units.
    """
    return huber(_check_tuning_constant(c), np.asarray(residuals, dtype=float))


def tukey_bisquare_loss(residuals: np.ndarray, c: float = TUKEY_C) -> np.ndarray:
    """SEGOR s.3.1 Tukey bisquare: c**2/6 [1 - (1 - (r/c)**2)**3] if |r| < c, else c**2/6.

    Elementwise on any shape; c is in residual units.
    """
    c = _check_tuning_constant(c)
    # Hand-written: scipy has no Tukey rho function. Clipping (r/c)**2 at 1
    # makes the outer branch fall out of the same formula (it equals c**2/6 there).
    u = np.minimum(np.square(np.asarray(residuals, dtype=float) / c), 1.0)
    return c * c / 6.0 * (1.0 - (1.0 - u) ** 3)


REGRESSION_LOSSES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "mse": squared_error,
    "huber": huber_loss,
    "tukey": tukey_bisquare_loss,
}


# SEGOR's shorthand (s.4: f-m, g-h, d-t, ...) for its three losses.
REGRESSION_LOSS_SHORTHANDS = {"m": "mse", "h": "huber", "t": "tukey"}


def regression_loss(name: str) -> Callable[[np.ndarray], np.ndarray]:
    """The per-sample loss called `name` or its shorthand (a function of the residuals)."""
    try:
        return REGRESSION_LOSSES[REGRESSION_LOSS_SHORTHANDS.get(name, name)]
    except KeyError:
        raise ValueError(
            f"unknown regression loss {name!r}; available: {sorted(REGRESSION_LOSSES)}"
        ) from None


def zero_one_loss(predicted_labels: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Per-sample zero-one loss I[prediction != y] as floats; broadcasts, e.g. (t, n) vs (n,).

    The loss of single classifiers' label predictions, e.g. the (t, n) loss
    matrix that the agnostic Bayes posteriors take.
    """
    return np.not_equal(predicted_labels, y).astype(float)


# Classification (SEGO s.3). The search combines the members' 0/1 correctness
# vectors c_h = I[h(x) = y] by their mean: for an ensemble of m members the mean
# correctness is c / m with c the correct votes, the multiclass margin (eq. 7) is
# M = 2 c / m - 1 and the residual against the target 1 is r = c / m - 1 = (M - 1) / 2.
# So the margin loss (eq. 8), (1 - M) / 2, is |r| and the squared-margin loss
# (eq. 9), (1 - M)**2 / 4, is r**2: the mean-combiner machinery of the regression
# strategies (cv_loss_of_mean_ensembles, greedy selection, BFGS) optimizes them
# unchanged. For one model both are its zero-one loss.
# The margin loss is linear in the members, so an ensemble minimizing it is
# never better than its best member (SEGO s.3.3): it is here as the paper's
# eq. 8, for comparison. A vote's own zero-one error is not a function of the
# mean correctness: post-hoc selection computes it from the labels
# (selection.greedy_vote_selection).
VOTE_LOSSES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "squared_margin": squared_error,
    "margin": np.abs,
}


def objective_loss(task: str, name: str) -> Callable[[np.ndarray], np.ndarray]:
    """Per-sample loss of the residuals a strategy minimizes, for `task`.

    Regression: a loss of `regression_loss` ("mse", "huber", "tukey" or m/h/t) on
    residuals of the standardized target. Classification: a loss of VOTE_LOSSES
    on the residuals of the members' mean correctness against 1 (see above).
    "auto" is mse for regression and SEGO's squared margin for classification.
    """
    if task == "regression":
        return regression_loss("mse" if name == "auto" else name)
    if task != "classification":
        raise ValueError(
            f"unknown task {task!r}; expected 'regression' or 'classification'"
        )
    name = "squared_margin" if name == "auto" else name
    try:
        return VOTE_LOSSES[name]
    except KeyError:
        raise ValueError(
            f"loss {name!r} does not apply to classification; available: "
            f"{sorted(VOTE_LOSSES)} or auto"
        ) from None


def fold_weights(fold_ids: np.ndarray) -> np.ndarray:
    """Weights w of shape (n,) such that per_sample_losses @ w is the k-fold CV loss.

    The CV loss is the mean over folds of each fold's mean loss (SEGOR Alg. 1,
    "cross-val"), so sample i weighs 1 / (k * size of its fold). With equal
    folds this is the plain mean.
    """
    fold_ids = np.asarray(fold_ids)
    folds, inverse, counts = np.unique(
        fold_ids, return_inverse=True, return_counts=True
    )
    return 1.0 / (len(folds) * counts[inverse])


# Candidates are scored in blocks of this many rows so the (block, n) temporaries
# stay in cache: whole-pool temporaries (80 MB each at 1000 x 10,000) made the
# same arithmetic 3.4x slower (benchmarks/bookkeeping.py).
ROW_BLOCK = 32


def cv_loss_of_mean_ensembles(
    member_sum: np.ndarray,
    member_count: int,
    candidate_predictions: np.ndarray,
    y: np.ndarray,
    per_sample_loss: Callable[[np.ndarray], np.ndarray],
    weights: np.ndarray,
) -> np.ndarray:
    """CV loss of the mean ensemble (members + h) for every candidate h at once.

    member_sum: (n,) sum of the current members' out-of-fold predictions;
    member_count: how many members that sum holds (0 for an empty ensemble,
    which scores each candidate alone); candidate_predictions: (t, n); y: (n,);
    weights: (n,) from `fold_weights`, or (n, k) for k weightings at once (e.g.
    bootstrap replicas). Returns (t,) or (t, k): O(t * n) array work, no Python
    loop over candidates (design.md s.3).
    """
    candidate_predictions = np.asarray(candidate_predictions, dtype=float)
    losses = np.empty((len(candidate_predictions), *np.shape(weights)[1:]))
    for start in range(0, len(candidate_predictions), ROW_BLOCK):
        block = candidate_predictions[start : start + ROW_BLOCK] + member_sum
        block /= member_count + 1
        block -= y
        losses[start : start + ROW_BLOCK] = per_sample_loss(block) @ weights
    return losses
