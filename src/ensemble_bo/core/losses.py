"""Per-sample losses and the cross-validated loss of out-of-fold predictions."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np


def squared_error(residuals: np.ndarray) -> np.ndarray:
    """Per-sample squared error r**2, elementwise on any shape."""
    return np.square(residuals)


REGRESSION_LOSSES: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "mse": squared_error,
}


def regression_loss(name: str) -> Callable[[np.ndarray], np.ndarray]:
    """The per-sample loss called `name` (a function of the residuals)."""
    try:
        return REGRESSION_LOSSES[name]
    except KeyError:
        raise ValueError(
            f"unknown regression loss {name!r}; available: {sorted(REGRESSION_LOSSES)}"
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
    member_count: how many members that sum holds (0 for an empty ensemble);
    candidate_predictions: (t, n); y: (n,); weights: (n,) from `fold_weights`.
    Returns (t,): O(t * n) array work, no loop over candidates (design.md s.3).
    """
    mean_predictions = (member_sum + candidate_predictions) / (member_count + 1)
    return per_sample_loss(mean_predictions - y) @ weights
