"""Prediction intervals and prediction sets with a coverage guarantee: CV+.

The search already splits the training rows into k folds. Fitting the final
ensemble once more on each fold's complement gives, for every training row i,
the prediction of a model that never saw it, mu_{-k(i)}(x_i), and for a new
row x the k fold predictions mu_{-j}(x). CV+ (Barber, Candes, Ramdas and
Tibshirani 2021, "Predictive inference with the jackknife+", s.3) turns these
into an interval for x from the out-of-fold residuals R_i = |y_i -
mu_{-k(i)}(x_i)|, with alpha = 1 - coverage:

    lower(x) = the floor(alpha (n+1))-th smallest of  mu_{-k(i)}(x) - R_i
    upper(x) = the ceil((1-alpha)(n+1))-th smallest of mu_{-k(i)}(x) + R_i

over the n training rows. For exchangeable rows it covers a new y with
probability at least 1 - 2 alpha - min(2(1 - 1/k)/(n/k + 1), (1 - k/n)/(k + 1))
(their Theorem 4), and in practice close to 1 - alpha. It needs k models, not
n (the jackknife+'s), and no rows held back from training (split conformal's).
The ensemble's members and weights were chosen on these same out-of-fold
predictions, so the residuals are slightly optimistic; the run measures the
coverage on its test split.

For classes the same construction is the cross-conformal prediction set
(Vovk 2015; Romano, Sesia and Candes 2020, s.2.4, CV+ for classification),
with the score s(x, y) = 1 - p(y | x) (LAC: the least ambiguous sets on
average, Sadinle, Lei and Wasserman 2019): class y joins the set of x when

    #{i : s_i < s_{-k(i)}(x, y)} < ceil((1-alpha)(n+1)),

s_i the out-of-fold score of row i's own class. A set may be empty (no class
is plausible at that coverage) or hold every class.

MAPIE computes both (CrossConformalRegressor, method "plus";
CrossConformalClassifier with agg_scores="crossval"), but only from models it
fits itself; here the fold models are the ensemble's, fitted by
core.evaluation's fold loop on the search's folds, so the formulas are written
out (tests/core/test_conformal.py checks them against MAPIE on the same folds).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, clone
from sklearn.utils import _safe_indexing
from sklearn.utils.validation import check_is_fitted, column_or_1d

from ensemble_bo.core.evaluation import checked_fold_ids, fitted_fold_models

# Coverages the runs report (test coverage, width or set size at each).
REPORTED_COVERAGES = (0.8, 0.9, 0.95)


def _rank(coverage: float, n: int) -> int:
    # The tolerance keeps a product such as 0.9 * 100 from rounding up a rank.
    return math.ceil(coverage * (n + 1) - 1e-9)


def conformal_reachable(coverage: float, n: int) -> bool:
    """Whether n training rows give `coverage` a finite bound (conformal_rank
    would not refuse it for its rows)."""
    return _rank(coverage, n) <= n


def conformal_rank(coverage: float, n: int) -> int:
    """ceil(coverage (n+1)): the order statistic CV+ takes among n values.

    ValueError naming the smallest n that reaches `coverage` where n rows
    cannot (the rank would exceed n: an infinite bound).
    """
    if isinstance(coverage, bool) or not 0 < coverage < 1:
        raise ValueError(f"coverage must be in (0, 1), got {coverage!r}")
    rank = _rank(coverage, n)
    if rank > n:
        needed = math.ceil(coverage / (1 - coverage) - 1e-9)
        raise ValueError(
            f"coverage={coverage!r} needs at least {needed} training rows for a "
            f"finite bound; there are {n}"
        )
    return rank


def cv_plus_intervals(
    fold_predictions: np.ndarray,
    residuals: np.ndarray,
    residual_folds: np.ndarray,
    coverage: float,
    fold_scales: np.ndarray | None = None,
) -> np.ndarray:
    """CV+ intervals, shape (m, 2): lower and upper bound of each new row.

    fold_predictions (k, m): fold model j's prediction for each new row;
    residuals (n,): the training rows' absolute out-of-fold residuals;
    residual_folds (n,): the fold (row of fold_predictions) that held each
    training row out. The formula is the module docstring's. Normalized
    (adaptive) CV+: `residuals` divided by a scale of their row, and
    fold_scales (k, m) the same scale of each new row by fold model j, which
    multiplies them back: R_i is replaced by R_i / s_i * s_{-k(i)}(x).

    The order statistics are taken without the (n, m) matrix of candidate
    bounds: within a fold, R_i s + mu rises with R_i, so each bound is the
    rank-th smallest of k sorted lists, found exactly per row
    (`_order_statistic`): O(k m log n) rather than O(n m).
    """
    fold_predictions = np.asarray(fold_predictions, dtype=float)
    residuals = np.asarray(residuals, dtype=float)
    residual_folds = np.asarray(residual_folds)
    rank = conformal_rank(coverage, len(residuals))
    sorted_residuals = [
        np.sort(residuals[residual_folds == fold])
        for fold in range(len(fold_predictions))
    ]
    scales = np.ones_like(fold_predictions) if fold_scales is None else fold_scales
    # lower: the (n+1-rank)-th smallest of mu - R, i.e. minus the rank-th
    # smallest of R - mu.
    lower = -_order_statistic(sorted_residuals, scales, -fold_predictions, rank)
    upper = _order_statistic(sorted_residuals, scales, fold_predictions, rank)
    return np.column_stack([lower, upper])


def _order_statistic(
    sorted_values: list[np.ndarray],
    scales: np.ndarray,
    shifts: np.ndarray,
    rank: int,
) -> np.ndarray:
    """(m,): for each new row x, the rank-th smallest of the values
    S_j[i] * scales[j, x] + shifts[j, x] over folds j and their sorted
    S_j >= 0, exactly as those floating-point values are computed.

    Written here because no library selects across sorted lists with a
    per-query transform. A bisection on the values' ordered bit patterns
    (at most 64 steps) keeps count(lo) < rank <= count(hi) until lo and hi
    are adjacent doubles, so hi is the answer; each count is exact: each
    fold's values rise with S_j, and a bisection on its indices counts those
    <= t.
    """
    values = [
        (s[0] * scales[j] + shifts[j], s[-1] * scales[j] + shifts[j])
        for j, s in enumerate(sorted_values)
        if len(s)
    ]
    lo = _ordered_bits(np.min([first for first, _ in values], axis=0)) - 1
    hi = _ordered_bits(np.max([last for _, last in values], axis=0))
    while True:
        open_rows = hi > lo + 1
        if not open_rows.any():
            return _from_ordered_bits(hi)
        # floor((lo + hi) / 2) without the sum, which overflows int64 when
        # the bracket spans negative and positive doubles
        mid = (lo >> 1) + (hi >> 1) + (lo & hi & 1)
        enough = _counts(sorted_values, scales, shifts, _from_ordered_bits(mid)) >= rank
        hi = np.where(open_rows & enough, mid, hi)
        lo = np.where(open_rows & ~enough, mid, lo)


def _counts(
    sorted_values: list[np.ndarray],
    scales: np.ndarray,
    shifts: np.ndarray,
    limits: np.ndarray,
) -> np.ndarray:
    """(m,): how many values S_j[i] * scales[j] + shifts[j] are <= limits."""
    total = np.zeros(len(limits), dtype=np.int64)
    for j, values in enumerate(sorted_values):
        lo = np.zeros(len(limits), dtype=np.int64)
        hi = np.full(len(limits), len(values), dtype=np.int64)
        while (lo < hi).any():
            searching = lo < hi
            mid = (lo + hi) // 2
            probe = values[np.minimum(mid, len(values) - 1)] * scales[j] + shifts[j]
            below = searching & (probe <= limits)
            lo = np.where(below, mid + 1, lo)
            hi = np.where(searching & ~below, mid, hi)
        total += lo
    return total


# Doubles map to int64 in the same order (negative ones with their magnitude
# bits flipped), so that a bisection on integers walks adjacent doubles.
_MAGNITUDE = np.int64(0x7FFFFFFFFFFFFFFF)


def _ordered_bits(values: np.ndarray) -> np.ndarray:
    bits = np.asarray(values, dtype=np.float64).view(np.int64)
    return np.where(bits < 0, bits ^ _MAGNITUDE, bits)


def _from_ordered_bits(ordered: np.ndarray) -> np.ndarray:
    bits = np.where(ordered < 0, ordered ^ _MAGNITUDE, ordered)
    return bits.view(np.float64)


def cross_conformal_sets(
    fold_scores: np.ndarray,
    scores: np.ndarray,
    score_folds: np.ndarray,
    coverage: float,
) -> np.ndarray:
    """Cross-conformal prediction sets, shape (m, n_classes), True where a
    class is in the row's set.

    fold_scores (k, m, n_classes): fold model j's score 1 - p(class | row) of
    each new row and class; scores (n,): each training row's out-of-fold score
    of its own class; score_folds (n,): the fold that held it out.
    """
    fold_scores = np.asarray(fold_scores, dtype=float)
    scores = np.asarray(scores, dtype=float)
    score_folds = np.asarray(score_folds)
    rank = conformal_rank(coverage, len(scores))
    # Per fold, how many of its held-out rows score below the new score:
    # exact counts from sorted scores, without an (n, m, classes) array.
    below = np.zeros(fold_scores.shape[1:], dtype=np.int64)
    for fold, fold_score in enumerate(fold_scores):
        held_out = np.sort(scores[score_folds == fold])
        below += np.searchsorted(held_out, fold_score, side="left")
    return below < rank


def expected_calibration_error(
    probabilities: np.ndarray, labels: np.ndarray, n_bins: int = 10
) -> tuple[float, list[dict[str, float]]]:
    """Top-label expected calibration error and its reliability table.

    probabilities (n, n_classes); labels (n,) class codes 0..n_classes-1.
    Rows are binned by their top probability (the confidence) into `n_bins`
    equal-width bins of [0, 1]; ECE = sum over bins of (rows in bin / n) *
    |accuracy in bin - mean confidence in bin| (Guo et al. 2017, eq. 3).
    Written here because scikit-learn's calibration_curve is binary only.
    The table: one row per non-empty bin, its edges, rows, mean confidence
    and accuracy (the reliability diagram's points).
    """
    probabilities = np.asarray(probabilities, dtype=float)
    labels = np.asarray(labels)
    confidence = probabilities.max(axis=1)
    correct = probabilities.argmax(axis=1) == labels
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    # Right-closed bins, the first also holding 0: (0.9, 1.0] is the top one.
    bins = np.clip(np.searchsorted(edges, confidence, side="left") - 1, 0, n_bins - 1)
    table = []
    error = 0.0
    for b in range(n_bins):
        rows = bins == b
        if not rows.any():
            continue
        mean_confidence = float(confidence[rows].mean())
        accuracy = float(correct[rows].mean())
        error += rows.mean() * abs(accuracy - mean_confidence)
        table.append(
            {
                "bin_lower": float(edges[b]),
                "bin_upper": float(edges[b + 1]),
                "rows": int(rows.sum()),
                "mean_confidence": mean_confidence,
                "accuracy": accuracy,
            }
        )
    return float(error), table


class _CrossConformal(BaseEstimator):
    """What both conformal wrappers share: the final model and k fold models.

    Parameters
    ----------
    estimator : estimator
        The final model, refit on all rows by fit; predict and predict_proba
        are its.
    fold_ids : array-like of shape (n_samples,)
        The fold of each row of the X given to fit (at least two folds).
    fold_estimator : estimator or None, default=None
        What each fold fits on the other folds' rows (None: `estimator`); a
        bagged final model takes its unbagged ensemble here.
    train_fraction : float in (0, 1], default=1.0
        The share of the other folds' rows each fold model fits on (a seeded
        sample, stratified for classes: core.evaluation.fitted_fold_models).
        The guarantee holds as for any fold models fitted without their
        fold's rows; large data keeps them small and quick to fit, at the
        price of somewhat wider intervals or larger sets.
    calibration_folds : sequence of fold ids or None, default=None
        The folds whose rows calibrate, each with a model fitted without its
        rows (None: every fold, CV+). One fold makes it split conformal
        (Lei et al. 2018, "Distribution-free predictive inference for
        regression", s.2.2): the formulas above with k = 1 and n its rows,
        whose coverage is at least `coverage` (not 1 - 2 alpha) for
        exchangeable rows; large data needs one fold model, not k.

    Attributes
    ----------
    estimator_ : estimator
        `estimator` fitted on all rows.
    fold_estimators_ : list of estimator, one per calibrating fold in sorted
        fold order
        fold_estimators_[j] was fitted on the rows outside the j-th of them.
    score_folds_ : ndarray of shape (n_calibration,)
        Index into fold_estimators_ of the model that held each calibrating
        row out (in row order; every row for CV+).
    """

    def __init__(
        self,
        estimator,
        fold_ids,
        fold_estimator=None,
        train_fraction=1.0,
        calibration_folds=None,
    ):
        self.estimator = estimator
        self.fold_ids = fold_ids
        self.fold_estimator = fold_estimator
        self.train_fraction = train_fraction
        self.calibration_folds = calibration_folds

    def _fit_folds(self, X, y, score) -> np.ndarray:
        """Fit the final and the fold models; `score(model, X_rows, y_rows)`
        gives the held-out rows' conformity scores, (rows,) or (rows, c).
        Returns those of the calibrating rows, (n_calibration,) or
        (n_calibration, c), in row order."""
        fold_ids, folds = checked_fold_ids(self.fold_ids, len(y))
        calibrating = self.calibration_folds
        if calibrating is not None and (
            not len(calibrating) or not np.isin(calibrating, folds).all()
        ):
            raise ValueError(
                f"calibration_folds must name folds of fold_ids "
                f"{folds.tolist()}, got {list(calibrating)!r}"
            )
        self.estimator_ = clone(self.estimator).fit(X, y)
        template = (
            self.estimator if self.fold_estimator is None else self.fold_estimator
        )
        scores = None
        score_folds = np.full(len(y), -1, dtype=np.int64)
        self.fold_estimators_ = []
        for j, (held_out, fitted) in enumerate(
            fitted_fold_models(
                template,
                X,
                y,
                fold_ids,
                folds=calibrating,
                train_fraction=self.train_fraction,
            )
        ):
            found = score(fitted, _safe_indexing(X, held_out), y[held_out])
            if scores is None:
                scores = np.empty((len(y), *np.shape(found)[1:]))
            scores[held_out] = found
            score_folds[held_out] = j
            self.fold_estimators_.append(fitted)
        calibrated = score_folds >= 0
        self.score_folds_ = score_folds[calibrated]
        if hasattr(self.estimator_, "n_features_in_"):
            self.n_features_in_ = self.estimator_.n_features_in_
        if hasattr(self.estimator_, "feature_names_in_"):
            self.feature_names_in_ = self.estimator_.feature_names_in_
        return scores[calibrated]

    def predict(self, X):
        """The final model's predictions, shape (n_samples,)."""
        check_is_fitted(self)
        return self.estimator_.predict(X)


class CrossConformalRegressor(RegressorMixin, _CrossConformal):
    """A regressor with CV+ prediction intervals (module docstring).

    Parameters: see `_CrossConformal`; `spread`, default None: a function
    (fitted model, X) -> (n_samples,) of how uncertain the model is on each
    row (core.estimator.member_spread, the disagreement of an ensemble's
    members), which makes adaptive intervals possible. Attributes: those,
    `residuals_` (n_calibration,), the calibrating rows' absolute out-of-fold
    residuals, and with
    `spread`, `spread_floor_`: the median out-of-fold spread, added to every
    spread so that a row where the members agree still gets an interval.
    """

    def __init__(
        self,
        estimator,
        fold_ids,
        fold_estimator=None,
        train_fraction=1.0,
        calibration_folds=None,
        spread=None,
    ):
        super().__init__(
            estimator, fold_ids, fold_estimator, train_fraction, calibration_folds
        )
        self.spread = spread

    def fit(self, X, y):
        """Fit `estimator` on all rows and the fold models; record the
        residuals (and, with `spread`, each held-out row's spread)."""
        y = column_or_1d(y, warn=True).astype(float)

        def residuals(model, X_rows, y_rows):
            residual = np.abs(y_rows - model.predict(X_rows))
            if self.spread is None:
                return residual
            return np.column_stack([residual, self.spread(model, X_rows)])

        scores = self._fit_folds(X, y, residuals)
        if self.spread is None:
            self.residuals_ = scores
            return self
        self.residuals_, spreads = scores[:, 0], scores[:, 1]
        floor = float(np.median(spreads))
        self.spread_floor_ = floor if floor > 0 else 1.0
        self.scaled_residuals_ = self.residuals_ / (spreads + self.spread_floor_)
        return self

    def predict_interval(
        self, X, coverage: float = 0.9, adaptive: bool = False
    ) -> np.ndarray:
        """CV+ prediction intervals, shape (n_samples, 2): lower, upper.

        Each covers its row's target with probability at least about
        1 - 2 (1 - coverage) for exchangeable data, and close to `coverage`
        in practice. The bounds come from the fold models, so the final
        model's prediction lies inside them for all but odd rows.
        `adaptive` (needs `spread`): normalized CV+, each residual divided by
        its row's spread plus `spread_floor_` and multiplied back by the new
        row's, so rows where the members disagree get wider intervals.
        """
        return self.predict_intervals(X, (coverage,), adaptive)[coverage]

    def predict_intervals(
        self, X, coverages: Sequence[float], adaptive: bool = False
    ) -> dict[float, np.ndarray]:
        """predict_interval at each of `coverages`, by coverage, from one
        prediction of X by each fold model."""
        check_is_fitted(self)
        if adaptive and self.spread is None:
            raise ValueError("adaptive intervals need a spread; this model has none")
        fold_predictions = np.stack([m.predict(X) for m in self.fold_estimators_])
        if not adaptive:
            return {
                coverage: cv_plus_intervals(
                    fold_predictions, self.residuals_, self.score_folds_, coverage
                )
                for coverage in coverages
            }
        scales = np.stack(
            [self.spread(m, X) + self.spread_floor_ for m in self.fold_estimators_]
        )
        return {
            coverage: cv_plus_intervals(
                fold_predictions,
                self.scaled_residuals_,
                self.score_folds_,
                coverage,
                fold_scales=scales,
            )
            for coverage in coverages
        }


class CrossConformalClassifier(ClassifierMixin, _CrossConformal):
    """A classifier with cross-conformal prediction sets (module docstring).

    Parameters: see `_CrossConformal`. Attributes: those, `classes_` (the
    final model's), and `scores_` (n_calibration,), each calibrating row's
    out-of-fold score 1 - p(its class).
    """

    def fit(self, X, y):
        """Fit `estimator` on all rows and the fold models; record the scores."""
        y = column_or_1d(y, warn=True)
        self.classes_ = np.unique(y)
        self.scores_ = self._fit_folds(
            X,
            y,
            lambda model, X_rows, y_rows: 1
            - self._probabilities(model, X_rows)[
                np.arange(len(y_rows)), np.searchsorted(self.classes_, y_rows)
            ],
        )
        return self

    def _probabilities(self, model, X) -> np.ndarray:
        """`model`'s probabilities in `classes_` columns (n, n_classes); a class
        its training rows lacked gets 0."""
        proba = np.asarray(model.predict_proba(X), dtype=float)
        aligned = np.zeros((proba.shape[0], len(self.classes_)))
        aligned[:, np.searchsorted(self.classes_, model.classes_)] = proba
        return aligned

    def predict_proba(self, X):
        """The final model's class probabilities, shape (n_samples, n_classes)."""
        check_is_fitted(self)
        return self.estimator_.predict_proba(X)

    def predict_set(self, X, coverage: float = 0.9) -> np.ndarray:
        """Cross-conformal prediction sets, shape (n_samples, n_classes) of
        bool, columns in `classes_` order: True where the class is in the set.

        Each set holds its row's class with probability at least about
        1 - 2 (1 - coverage) for exchangeable data, and close to `coverage`
        in practice.
        """
        return self.predict_sets(X, (coverage,))[coverage]

    def predict_sets(self, X, coverages: Sequence[float]) -> dict[float, np.ndarray]:
        """predict_set at each of `coverages`, by coverage, from one
        prediction of X by each fold model."""
        check_is_fitted(self)
        fold_scores = np.stack(
            [1 - self._probabilities(m, X) for m in self.fold_estimators_]
        )
        return {
            coverage: cross_conformal_sets(
                fold_scores, self.scores_, self.score_folds_, coverage
            )
            for coverage in coverages
        }


def cross_conformal(
    estimator: BaseEstimator,
    fold_ids: np.ndarray,
    task: str,
    fold_estimator: BaseEstimator | None = None,
    spread: Callable[[BaseEstimator, Any], np.ndarray] | None = None,
    train_fraction: float = 1.0,
    calibration_folds: Sequence[int] | None = None,
) -> _CrossConformal:
    """`estimator` with CV+ intervals (regression; adaptive ones too with a
    `spread`) or cross-conformal sets (classification) over `fold_ids`, its
    fold models fitted on `train_fraction` of their rows; split conformal
    where `calibration_folds` names one fold."""
    if task == "classification":
        return CrossConformalClassifier(
            estimator, fold_ids, fold_estimator, train_fraction, calibration_folds
        )
    return CrossConformalRegressor(
        estimator, fold_ids, fold_estimator, train_fraction, calibration_folds, spread
    )
