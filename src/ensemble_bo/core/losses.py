"""Per-sample losses and the cross-validated loss of out-of-fold predictions."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

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


# Classification (SEGO s.3). The margin losses combine the members' 0/1
# correctness vectors c_h = I[h(x) = y] by their mean: for an ensemble of m
# members the mean correctness is c / m with c the correct votes, the multiclass
# margin (eq. 7) is M = 2 c / m - 1 and the residual against the target 1 is
# r = c / m - 1 = (M - 1) / 2. So the margin loss (eq. 8), (1 - M) / 2, is |r|
# and the squared-margin loss (eq. 9), (1 - M)**2 / 4, is r**2: the mean-combiner
# machinery of the regression strategies (cv_loss_of_mean_ensembles, greedy
# selection, BFGS) optimizes them unchanged. For one model both are its
# zero-one loss. The margin loss is linear in the members, so an ensemble
# minimizing it is never better than its best member (SEGO s.3.3): it is here
# as the paper's eq. 8, for comparison.
#
# The probability losses average the members' out-of-fold class probabilities
# (soft voting), through the same machinery: the log-loss of the mean only
# needs each member's probability of the true class, p_h(y_i | x_i), whose
# mean's residual against 1 is r = p - 1, so the loss is -log(1 + r); the Brier
# score (Brier 1950: the squared distance of the probability vector to the
# one-hot label, summed over the classes, in [0, 2]) takes the (n, K) residuals
# of the mean probabilities against the one-hot labels and sums the class axis.
#
# The zero-one error of a vote is not a function of a mean: `error` scores one
# model by its zero-one loss (|r| of its correctness) and an ensemble of several
# by its plurality vote (selection.plurality_vote_cv_errors).


def margin_loss(residuals: np.ndarray) -> np.ndarray:
    """SEGO eq. 8 on residuals r = mean correctness - 1: |r|, elementwise."""
    return np.abs(residuals)


# The floor sklearn.metrics.log_loss clips probabilities to (its ceiling,
# 1 - eps, does not matter for the true class's term).
LOG_LOSS_EPS = float(np.finfo(float).eps)


def log_loss_of_true_class(residuals: np.ndarray) -> np.ndarray:
    """-log p on residuals r = p - 1 of the probability p of the true class; any shape.

    p is clipped to [LOG_LOSS_EPS, 1], so a model sure of a wrong class costs
    -log(eps) = 36.04 on that sample instead of infinity.
    """
    return -np.log(np.clip(1.0 + np.asarray(residuals, dtype=float), LOG_LOSS_EPS, 1.0))


def brier_loss(residuals: np.ndarray) -> np.ndarray:
    """Brier score on residuals (..., n, K) of probabilities minus one-hot labels: (..., n).

    The sum over the K classes of the squared residuals (Brier 1950; 2 for a
    sure wrong prediction, twice scikit-learn's binary `brier_score_loss`).
    """
    return np.square(residuals).sum(axis=-1)


# Relative tolerance under which two classes' vote totals count as tied: sums of
# float weights in different orders differ by a few ulps, and those must not
# decide a vote that the rule says goes to the lowest class index.
TIE_RTOL = 1e-9


def vote_winners(scores: np.ndarray) -> np.ndarray:
    """The class each row's vote picks, (n,) from scores (n, K): the lowest
    index within TIE_RTOL of the row's top score (WeightedVoteClassifier's rule)."""
    best = scores.max(axis=1, keepdims=True)
    return np.argmax(scores >= best - TIE_RTOL * np.abs(best), axis=1)


# What a pool member contributes to each objective (Pool.member_outputs).
PREDICTIONS = "predictions"  # regression predictions (t, n)
CORRECTNESS = "correctness"  # 0/1 I[label = y] (t, n)
TRUE_CLASS_PROBABILITY = "true_class_probability"  # p_h(y_i | x_i) (t, n)
PROBABILITIES = "probabilities"  # class probabilities (t, n, K)
# sum_k p_h(k | x_i)**2 (t, n): with the true-class probability, what the Brier
# score's expansion needs besides one product over all probabilities.
PROBABILITY_SQUARE_NORM = "probability_square_norm"
# The predicted class codes as int32 (t, n): what a vote gathers its counts by,
# without converting the float predictions on every iteration.
CLASS_CODES = "class_codes"


@dataclass(frozen=True)
class Objective:
    """The CV loss a search or a selection minimizes, and what it is computed on.

    per_sample_loss maps the residuals of the members' mean output against
    `target(y)` to per-sample losses (summing a class axis away); `outputs` is
    the kind of pool output members contribute (Pool.member_outputs); `vote`:
    ensembles of several members are scored by their plurality vote, not by
    the mean of the outputs (the `error` objective).
    """

    name: str
    task: str
    per_sample_loss: Callable[[np.ndarray], np.ndarray]
    outputs: str
    vote: bool = False

    @property
    def voting(self) -> str:
        """The final classifier's matching combiner: soft for the probability losses."""
        return (
            "soft"
            if self.outputs in (TRUE_CLASS_PROBABILITY, PROBABILITIES)
            else "hard"
        )

    def target(self, y: np.ndarray) -> np.ndarray:
        """What the members' mean output is compared with, for targets or class codes y (n,).

        Regression: y, shape (n,); correctness and true-class probability: ones
        (n,); probabilities: one-hot codes (n, K), K = max code + 1.
        """
        y = np.asarray(y)
        if self.outputs == PREDICTIONS:
            return y.astype(float)
        if self.outputs == PROBABILITIES:
            return np.eye(int(y.max()) + 1)[y.astype(int)]
        return np.ones(len(y))


CLASSIFICATION_OBJECTIVES: dict[str, Objective] = {
    objective.name: objective
    for objective in (
        Objective("error", "classification", margin_loss, CORRECTNESS, vote=True),
        Objective("squared_margin", "classification", squared_error, CORRECTNESS),
        Objective("margin", "classification", margin_loss, CORRECTNESS),
        Objective(
            "log_loss", "classification", log_loss_of_true_class, TRUE_CLASS_PROBABILITY
        ),
        Objective("brier", "classification", brier_loss, PROBABILITIES),
    )
}


def objective(task: str, name: str, auto: str = "squared_margin") -> Objective:
    """The objective called `name` for `task`.

    Regression: a loss of `regression_loss` ("mse", "huber", "tukey" or m/h/t)
    on residuals of the standardized target. Classification: one of
    CLASSIFICATION_OBJECTIVES. "auto" is mse for regression and `auto` for
    classification (SEGO's squared margin; post-hoc selection passes "error").
    """
    if task == "regression":
        name = "mse" if name == "auto" else name
        per_sample_loss = regression_loss(name)  # raises for an unknown name
        return Objective(
            REGRESSION_LOSS_SHORTHANDS.get(name, name),
            task,
            per_sample_loss,
            PREDICTIONS,
        )
    if task != "classification":
        raise ValueError(
            f"unknown task {task!r}; expected 'regression' or 'classification'"
        )
    try:
        return CLASSIFICATION_OBJECTIVES[auto if name == "auto" else name]
    except KeyError:
        raise ValueError(
            f"loss {name!r} does not apply to classification; available: "
            f"{sorted(CLASSIFICATION_OBJECTIVES)} or auto"
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
    bootstrap replicas). Outputs with a class axis (class probabilities) are
    (n, K) per model instead of (n,), y too, and per_sample_loss sums that axis
    away. Returns (t,) or (t, k): O(t * n) array work, no Python loop over
    candidates.
    """
    candidate_predictions = np.asarray(candidate_predictions, dtype=float)
    losses = np.empty((len(candidate_predictions), *np.shape(weights)[1:]))
    # The same number of values per block whatever the class axis holds.
    rows = max(1, ROW_BLOCK // int(np.prod(candidate_predictions.shape[2:])))
    for start in range(0, len(candidate_predictions), rows):
        block = candidate_predictions[start : start + rows] + member_sum
        block /= member_count + 1
        block -= y
        losses[start : start + rows] = per_sample_loss(block) @ weights
    return losses


def log_loss_of_mean_ensembles(
    member_sum: np.ndarray | float,
    member_count: int,
    true_class_probabilities: np.ndarray,
    weights: np.ndarray,
) -> np.ndarray:
    """`cv_loss_of_mean_ensembles` for the log-loss, in place.

    member_sum: (n,) sum of the members' probabilities of the true class (0: no
    member); true_class_probabilities: (t, n) of the candidates; weights: (n,)
    or (n, k). Returns (t,) or (t, k), bit for bit the generic path's with
    `log_loss_of_true_class`: -log of the mean (S + p_h) / M, clipped to
    [LOG_LOSS_EPS, 1]. Written apart because each of the generic path's steps
    allocates a (block, n) temporary, and at 1000 x 10,000 those passes cost
    more than the logarithm (benchmarks/bookkeeping.py).
    """
    losses = np.empty((len(true_class_probabilities), *np.shape(weights)[1:]))
    for start in range(0, len(true_class_probabilities), ROW_BLOCK):
        block = true_class_probabilities[start : start + ROW_BLOCK] + member_sum
        block /= member_count + 1
        # p as the generic path rounds it, (p - 1) + 1: the same bits, so a
        # search gives the same ensemble through either path.
        block -= 1.0
        block += 1.0
        np.clip(block, LOG_LOSS_EPS, 1.0, out=block)
        np.log(block, out=block)
        losses[start : start + ROW_BLOCK] = -(block @ weights)
    return losses


def brier_of_mean_ensembles(
    member_sum: np.ndarray | float,
    member_count: int,
    probabilities: np.ndarray,
    square_norms: np.ndarray,
    true_class_probabilities: np.ndarray,
    labels: np.ndarray,
    weights: np.ndarray,
) -> np.ndarray:
    """`cv_loss_of_mean_ensembles` for the Brier score, by its expansion.

    member_sum: (n, K) sum of the members' probabilities (0: no member);
    probabilities: (t, n, K) of the candidates, with their square_norms and
    true_class_probabilities (t, n) (Pool.member_outputs); labels: (n,) codes;
    weights: (n,) or (n, k). Returns (t,) or (t, k), the same values up to
    rounding. With p = (S + p_h) / M the mean of M = members + 1,
    sum_k (p_k - Y_k)**2 = |p|**2 - 2 p_y + 1 = (|S|**2 + 2 S.p_h + |p_h|**2) / M**2
    - 2 (S_y + p_h,y) / M + 1, so only S.p_h reads every class of every
    candidate: one matrix product instead of the generic path's passes over
    (t, n, K) temporaries (benchmarks/bookkeeping.py).
    """
    n, n_classes = probabilities.shape[1:]
    total = np.broadcast_to(np.asarray(member_sum, dtype=float), (n, n_classes))
    columns = weights if weights.ndim == 2 else weights[:, None]  # (n, k)
    size = member_count + 1
    rows = np.arange(n)
    constant = (
        np.square(total).sum(axis=1) / size**2 - 2.0 * total[rows, labels] / size + 1.0
    ) @ columns
    cross = probabilities.reshape(len(probabilities), n * n_classes) @ (
        total[:, :, None] * columns[:, None, :]
    ).reshape(n * n_classes, -1)
    losses = (
        constant
        + (2.0 * cross + square_norms @ columns) / size**2
        - 2.0 * (true_class_probabilities @ columns) / size
    )
    return losses if weights.ndim == 2 else losses[:, 0]
